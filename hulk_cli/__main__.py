"""``python -m hulk_cli``: the ``hulk`` command."""

from hulk_cli.app import main

main()
