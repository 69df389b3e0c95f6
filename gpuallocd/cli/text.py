"""Text safe to print on a terminal, with nothing heavier than the standard library (`run`
imports it before it starts the command)."""

from __future__ import annotations

__all__ = ["escape_unprintable"]


def escape_unprintable(text: str) -> str:
    """`text` with every character a terminal would act on (ESC, BEL, CR, bidi overrides...)
    written as a Python escape, so a cell can never move the cursor or forge a row."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
