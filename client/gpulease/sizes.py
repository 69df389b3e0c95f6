"""Memory sizes as people write them: `20G`, `20GiB`, `512M`, `1.5T`, `4096B`, or an int of
bytes. A number without a unit is refused: `20` is far more often meant as 20 GiB than as
20 bytes, so it is named as a likely mistake instead of being read either way. Power
limits: `250W` or a number of watts."""

from __future__ import annotations

import re

__all__ = ["MAX_POWER_LIMIT_WATTS", "parse_size", "parse_watts"]

# The highest power limit a request may name: past any GPU's (a card's own range bounds the
# rest). The client, the daemon's API and the MCP tools all refuse above it.
MAX_POWER_LIMIT_WATTS = 100_000

_UNITS = {"B": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
# Compiled at first use (`re` keeps them): most callers never parse a size, and compiling
# both at import cost every `import gpulease` about half a millisecond.
_SIZE = r"^\s*(\d+(?:\.\d+)?)\s*(?:([KMGT])(?:I?B)?|(B))?\s*$"
_WATTS = r"^\s*(\d{1,6})\s*W?\s*$"


def parse_size(size: str | int) -> int:
    """Bytes from `20G` (binary units: K, M, G, T are powers of 1024; `20GiB` and `20GB`
    read the same; `B` is bytes), or an int of bytes. ValueError for anything else, for a
    string without a unit, or for zero."""
    if isinstance(size, bool):
        raise ValueError(f"not a memory size: {size!r}")
    if isinstance(size, int):
        value = size
    else:
        match = re.match(_SIZE, size, re.IGNORECASE)
        if match is None:
            raise ValueError(f"not a memory size: {size!r} (try 20G, 512M or 4096B)")
        number, unit = match.group(1), (match.group(2) or match.group(3) or "").upper()
        if not unit:
            raise ValueError(
                f"{size.strip()!r} has no unit: did you mean {number}GiB? "
                f"Write 20G, 512M, or {number}B for bytes"
            )
        value = int(float(number) * _UNITS[unit])
    if value < 1:
        raise ValueError(f"a memory size must be positive, not {size!r}")
    return value


def parse_watts(power: str | int) -> int:
    """Watts from `250W` or `250` (whole watts, 1 to MAX_POWER_LIMIT_WATTS). ValueError for
    anything else."""
    if isinstance(power, bool):
        raise ValueError(f"not a power limit: {power!r}")
    if isinstance(power, int):
        value = power
    else:
        match = re.match(_WATTS, power, re.IGNORECASE)
        if match is None:
            raise ValueError(f"not a power limit: {power!r} (try 250W)")
        value = int(match.group(1))
    if not 1 <= value <= MAX_POWER_LIMIT_WATTS:
        raise ValueError(f"a power limit must be 1 to {MAX_POWER_LIMIT_WATTS:,} W, not {power!r}")
    return value
