"""Memory sizes as people write them: `20G`, `512M`, `1.5T`, or a number of bytes."""

from __future__ import annotations

import re

__all__ = ["parse_size"]

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(size: str | int) -> int:
    """Bytes from `20G` (binary units: K, M, G, T are powers of 1024; `20GiB` and `20GB`
    read the same), or an int of bytes. ValueError for anything else or for zero."""
    if isinstance(size, bool):
        raise ValueError(f"not a memory size: {size!r}")
    if isinstance(size, int):
        value = size
    else:
        match = _SIZE.match(size)
        if match is None:
            raise ValueError(f"not a memory size: {size!r} (try 20G, 512M or a byte count)")
        value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if value < 1:
        raise ValueError(f"a memory size must be positive, not {size!r}")
    return value
