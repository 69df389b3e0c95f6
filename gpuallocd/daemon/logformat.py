"""The daemon's log lines: what users control (process names, labels, user names) may carry
ESC, BEL or a newline, so every message is escaped (`gpuallocd.text`) before it is written;
a reader's terminal never acts on it and no message forges a line. A traceback keeps its
lines, each escaped (an exception's message may quote what a user chose)."""

from __future__ import annotations

import logging
from typing import Any

from gpuallocd.text import escape_unprintable

__all__ = ["LOG_FORMAT", "EscapingFormatter"]

LOG_FORMAT = "gpuallocd: %(levelname)s %(message)s"


class EscapingFormatter(logging.Formatter):
    """A formatter whose messages are escaped; their arguments were users' to choose."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_unprintable(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return "\n".join(map(escape_unprintable, super().formatException(ei).split("\n")))
