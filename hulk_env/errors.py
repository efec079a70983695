"""One error type for bad user input, with the place it was found.

Loaders raise :class:`HulkInputError` with the file, row and field at fault; the CLI prints its
one-line message and exits with status 2, never a traceback.
"""

from __future__ import annotations


class HulkInputError(ValueError):
    """Bad input: a malformed file, an impossible number, an unknown name.

    Args:
        message: what is wrong and, where useful, how to fix it.
        source: the file (or object) the input came from.
        row: 1-based line or row number, or an item index.
        field: the column or key at fault.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        row: int | str | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.row = row
        self.field = field
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """The message prefixed with `file: row N: field F:` where known."""
        where = []
        if self.source:
            where.append(str(self.source))
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.field:
            where.append(f"field '{self.field}'")
        prefix = ": ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message
