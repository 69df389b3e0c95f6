"""Traces for `simulate`: JSON Lines of allocate and free operations.

    {"op": "allocate", "id": "j1", "count": 2}
    {"op": "allocate", "id": "j2", "gpus": [0, 3]}            specific GPUs, by index
    {"op": "allocate", "id": "j3", "gpus": [1], "count": 2}   GPU 1 and one more
    {"op": "allocate", "id": "s1", "memory_bytes": 21474836480}  a 20 GiB share
    {"op": "allocate", "id": "m1", "mig_profile": "1g.10gb", "count": 2}  two MIG instances
    {"op": "free", "id": "j1"}

Blank lines are skipped. A line that is not one of these stops the replay with a
TraceError that names the line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuallocd.errors import InvalidRequest, TraceError
from gpuallocd.policies.rules import requested_count

__all__ = ["TraceError", "TraceOp", "parse_op", "read_trace"]


@dataclass(frozen=True, slots=True)
class TraceOp:
    """One operation: `allocate` (count and/or GPU indices) or `free`."""

    line: int
    op: str
    id: str
    count: int | None = None
    gpus: tuple[int, ...] | None = None
    memory_bytes: int | None = None
    mig_profile: str | None = None

    @property
    def total(self) -> int:
        """How many GPUs an allocation asks for in all."""
        if self.count is None and self.gpus is None:
            return 1  # one share, or one MIG instance
        return self.count if self.count is not None else len(self.gpus or ())


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _allocation(line: int, item: dict[str, Any], lease: str) -> TraceOp:
    count, gpus = item.get("count"), item.get("gpus")
    memory, profile = item.get("memory_bytes"), item.get("mig_profile")
    if memory is not None and not (_is_int(memory) and memory >= 1):
        raise TraceError(line, "'memory_bytes' must be a positive integer")
    if profile is not None and not (isinstance(profile, str) and profile):
        raise TraceError(line, "'mig_profile' must be a non-empty string")
    if count is not None and not _is_int(count):
        raise TraceError(line, "'count' must be an integer of at least 1")
    if gpus is not None and not (isinstance(gpus, list) and gpus and all(map(_is_int, gpus))):
        raise TraceError(line, "'gpus' must be a non-empty list of GPU indices")
    picked = None if gpus is None else tuple(gpus)
    try:  # the rules of every allocate, as the daemon's API applies them
        requested_count(count, picked, memory, profile)
    except InvalidRequest as exc:
        raise TraceError(line, exc.message) from None
    return TraceOp(
        line=line,
        op="allocate",
        id=lease,
        count=count,
        gpus=picked,
        memory_bytes=memory,
        mig_profile=profile,
    )


def parse_op(line: int, text: str) -> TraceOp:
    """One trace line as an operation."""
    try:
        item = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(line, f"not JSON: {exc.msg}") from exc
    if not isinstance(item, dict):
        raise TraceError(line, "each line must be a JSON object")
    lease = item.get("id")
    if not isinstance(lease, str) or not lease:
        raise TraceError(line, "'id' must be a non-empty string")
    op = item.get("op")
    if op == "allocate":
        return _allocation(line, item, lease)
    if op == "free":
        return TraceOp(line=line, op="free", id=lease)
    raise TraceError(line, f"'op' must be 'allocate' or 'free', not {op!r}")


def read_trace(lines: Iterable[str]) -> Iterator[TraceOp]:
    """The operations of a trace, lazily, in order."""
    for number, text in enumerate(lines, start=1):
        if text.strip():
            yield parse_op(number, text)
