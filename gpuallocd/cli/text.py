"""Text safe to print on a terminal: the escaping of `gpuallocd.model.text`, which the daemon's log
uses too (one home for it), under the name the commands import."""

from __future__ import annotations

from gpuallocd.model.text import escape_unprintable

__all__ = ["escape_unprintable"]
