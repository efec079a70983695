"""Experiments that regenerate every table and figure of ``experiments/README.md``.

Each one is a single command, ``python -m experiments.<name> [--out DIR] [flags]``, reads its
settings from ``experiments/configs/<name>.yaml`` and writes CSVs, a Markdown summary and PNGs
into its output directory (default ``runs/experiments/<name>``).
"""
