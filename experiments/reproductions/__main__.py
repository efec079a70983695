"""``python -m experiments.reproductions [--json] [--case megatron|intellect1]``: every published
figure of :mod:`experiments.reproductions` beside hulk's value and the error (a Markdown table,
or JSON rows with ``error`` and ``within_tolerance``)."""

from __future__ import annotations

import argparse
import json
import sys

from experiments.reproductions import CASES, TOLERANCE, markdown_table, reproduce


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.reproductions", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of the Markdown table")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="only this case (repeatable)")
    args = parser.parse_args(argv)
    rows = reproduce(args.case)
    if args.json:
        print(json.dumps({"tolerance": TOLERANCE, "rows": [r.to_dict() for r in rows]}, indent=2))
    else:
        print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
