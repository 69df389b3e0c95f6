"""Text that users control (process names, labels, names of things), made safe to show on a
terminal or in a log line. The one home of the escaping: the CLI and the daemon's log both
use it. A pure function at the top of the package, beside `errors`, so every package may
import it; nothing heavier than the standard library (`run` imports it before its command)."""

from __future__ import annotations

__all__ = ["escape_unprintable"]


def escape_unprintable(text: str) -> str:
    """`text` with every character a terminal would act on (ESC, BEL, CR, LF, bidi
    overrides...) written as a Python escape, so a cell can never move the cursor or forge a
    row, and a log message never forges a line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
