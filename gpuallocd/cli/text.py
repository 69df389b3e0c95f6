"""Text safe to print on a terminal: the escaping of `gpuallocd.text`, which the daemon's log
uses too (one home for it), under the name the commands import."""

from __future__ import annotations

from gpuallocd.text import escape_unprintable

__all__ = ["escape_unprintable"]
