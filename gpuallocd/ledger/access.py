"""What the ledger's record classes share: a write (transaction or savepoint) and a read.

`Ledger` (store.py) defines both; the record classes (admin_records.py, usage_records.py)
are its bases, so each group of tables keeps its SQL in a module of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection

from gpuallocd.ledger.totals import Change

__all__ = ["LedgerAccess"]


class LedgerAccess:
    """The two ways into the ledger's one connection."""

    def _write(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[Connection]:
        raise NotImplementedError

    def _total_steps(self, changes: Iterable[Change]) -> list[tuple[str, Sequence[Any]]]:
        """The statements that add `changes` to their owners' running totals (totals.py)."""
        raise NotImplementedError

    def _hot_write(self, steps: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Fixed SQL straight on the sqlite3 connection (hot.py): rows written on every
        grant or end, where SQLAlchemy's own Python would be most of their cost."""
        raise NotImplementedError
