"""Memory sizes as people write them: `20G`, `512M`, `1.5T`, or a number of bytes; power
limits: `250W` or a number of watts."""

from __future__ import annotations

import re

__all__ = ["parse_size", "parse_watts"]

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_WATTS = re.compile(r"^\s*(\d{1,6})\s*W?\s*$", re.IGNORECASE)
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


def parse_watts(power: str | int) -> int:
    """Watts from `250W` or `250` (whole watts, 1 to 999999). ValueError for anything else."""
    if isinstance(power, bool):
        raise ValueError(f"not a power limit: {power!r}")
    if isinstance(power, int):
        value = power
    else:
        match = _WATTS.match(power)
        if match is None:
            raise ValueError(f"not a power limit: {power!r} (try 250W)")
        value = int(match.group(1))
    if not 1 <= value <= 999_999:
        raise ValueError(f"a power limit must be 1 to 999999 W, not {power!r}")
    return value
