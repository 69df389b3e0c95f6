"""Naming GPUs on the command line and in traces: by index or by UUID."""

from __future__ import annotations

from collections.abc import Iterable

from gpuallocd.errors import UnknownGpu
from gpuallocd.model import Topology

__all__ = ["resolve_gpu", "resolve_gpus"]


def resolve_gpu(topology: Topology, ref: int | str) -> str:
    """The UUID of a GPU named by index (int or digits) or by UUID."""
    text = str(ref).strip()
    if text.isdigit():
        gpu = topology.by_index().get(int(text))
        if gpu is not None:
            return gpu.uuid
    elif text in topology.by_uuid():
        return text
    known = ", ".join(str(g.index) for g in topology.gpus)
    raise UnknownGpu(f"no GPU {text!r} in topology {topology.name} (indices {known})", gpu=text)


def resolve_gpus(topology: Topology, refs: Iterable[int | str]) -> tuple[str, ...]:
    return tuple(resolve_gpu(topology, ref) for ref in refs)
