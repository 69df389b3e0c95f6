"""Lines and cells of pasted tool output, cleaned of what a copy adds.

A matrix reaches gpuallocd through terminals, mail replies, issue trackers and blogs: with
ANSI colour codes, CRLF line ends, `> ` quote prefixes, tabs turned into runs of spaces,
indentation, or cells glued together where a tab was lost. Every reader here works on
`Line`s: the text with tabs expanded to the 8-column stops a terminal uses (so a cell sits at
the same column whether it was pasted with tabs or spaces) and its 1-based line number, for
error messages that name the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Line", "Token", "clean_lines", "split_glued", "tokens"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_QUOTE = re.compile(r"^[ \t]*(?:>[ \t]?)+")
_TOKEN = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class Line:
    """One line of input: its 1-based number and its cleaned, tab-expanded text."""

    number: int
    text: str

    def is_blank(self) -> bool:
        return not self.text.strip()


@dataclass(frozen=True, slots=True)
class Token:
    """A run of non-space characters and the column where it starts."""

    text: str
    start: int


def clean_lines(text: str) -> list[Line]:
    """The lines of `text` without ANSI codes, CRs and quote prefixes, tabs expanded.

    A quote prefix is one or more `>` at the start of a line, each with one optional space
    after it (`> `, `>> `, `> > `), as mail replies and issue trackers quote. The rest of the
    line keeps its columns relative to the other lines quoted the same way.
    """
    raw_lines = [_ANSI.sub("", raw).replace("\r", "") for raw in text.split("\n")]
    stripped = [_QUOTE.sub("", raw, count=1) for raw in raw_lines]
    return [Line(number, raw.expandtabs(8)) for number, raw in enumerate(stripped, start=1)]


def tokens(line: Line, phrases: tuple[str, ...] = ()) -> list[Token]:
    """The line's cells split on whitespace; each of `phrases` stays one token."""
    pattern = _TOKEN
    if phrases:
        spaced = "|".join(r"\s+".join(map(re.escape, p.split())) for p in phrases)
        pattern = re.compile(rf"(?:{spaced})(?!\S)|\S+")
    return [Token(" ".join(m.group(0).split()), m.start()) for m in pattern.finditer(line.text)]


def split_glued(token: Token, piece: re.Pattern[str]) -> list[Token]:
    """A token made of several `piece`s run together, split; any other token unchanged."""
    parts = [m for m in piece.finditer(token.text)]
    if len(parts) < 2 or "".join(m.group(0) for m in parts) != token.text:
        return [token]
    return [Token(m.group(0), token.start + m.start()) for m in parts]
