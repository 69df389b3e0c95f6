"""The durable record of GPUs, leases and every lease transition."""

from __future__ import annotations

from gpuallocd.ledger.reader import LedgerReader
from gpuallocd.ledger.store import Ledger

__all__ = ["Ledger", "LedgerReader"]
