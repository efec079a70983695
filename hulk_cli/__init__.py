"""The ``hulk`` command (:mod:`hulk_cli.app`): one module per command group."""
