"""What the ledger's record classes share: a write (transaction or savepoint) and a read.

`Ledger` (store.py) defines both; the record classes (admin_records.py, usage_records.py)
are its bases, so each group of tables keeps its SQL in a module of its own.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

from sqlalchemy import Connection

__all__ = ["LedgerAccess"]


class LedgerAccess:
    """The two ways into the ledger's one connection."""

    def _write(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError
