"""A lease inside a lease: `gpu_lease(2)` in a script that `gpuallocctl run -n 2` started
uses the lease it runs under instead of taking two more GPUs.

The enclosing lease is the one GPUALLOCD_LEASE_ID names (`gpu_lease`, `run`, `shell`,
`allocate --export` and the Jupyter kernel export it). It is used when it is active and the
caller's own, and it covers the request: no more units than it holds, the GPUs named among
its own, a MIG profile or a share that its units are. The block then sees the first units
that fit (or the ones it named), is told so on stderr, and neither renews nor frees the
lease: its holder does. A request it cannot cover is refused (InvalidRequest) with the way
out: ask for less, or `nested="new"` for a lease of its own. A variable that names no live
lease of the caller (a stale export, another user's) is not a lease to nest in: a new lease
is taken as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from gpulease.errors import InvalidRequest, LeaseNotActive, UnknownLease
from gpulease.lease_id import LEASE_ID_VARIABLE
from gpulease.models import Lease, LeasedGpu

__all__ = ["NESTED_CHOICES", "check_nested", "enclosing_lease", "note", "part_of"]

NESTED_CHOICES = ("reuse", "new")
VARIABLE = LEASE_ID_VARIABLE


def check_nested(nested: str) -> str:
    if nested not in NESTED_CHOICES:
        raise ValueError(f"nested must be 'reuse' or 'new', not {nested!r}")
    return nested


def enclosing_lease(client: Any, nested: str) -> Lease | None:
    """The caller's live lease named by GPUALLOCD_LEASE_ID; None with `nested="new"`, without
    the variable, or where it names no active lease of the caller's."""
    lease_id = os.environ.get(VARIABLE, "").strip()
    if check_nested(nested) == "new" or not lease_id:
        return None
    try:
        lease: Lease = client.lease(lease_id)
    except (UnknownLease, LeaseNotActive, InvalidRequest):
        return None
    if lease.state != "active" or lease.owner_uid != os.getuid():
        return None
    return lease


def _matches(gpu: LeasedGpu, refs: Sequence[int | str]) -> bool:
    return gpu.uuid in refs or gpu.index in refs or gpu.parent_uuid in refs


def _fits(gpu: LeasedGpu, memory_bytes: int | None, mig_profile: str | None) -> bool:
    if mig_profile is not None:
        return gpu.kind == "mig" and gpu.mig_profile == mig_profile
    if memory_bytes is not None:
        return gpu.kind == "whole" or (gpu.memory_bytes or 0) >= memory_bytes
    return gpu.kind == "whole"


def _what(count: int, memory_bytes: int | None, mig_profile: str | None) -> str:
    if mig_profile is not None:
        return f"{count} {mig_profile} instance(s)"
    if memory_bytes is not None:
        return f"{count} share(s) of {memory_bytes / 2**30:.1f} GiB"
    return f"{count} whole GPU(s)"


def part_of(lease: Lease, options: dict[str, Any]) -> Lease:
    """The part of `lease` that a request with these `allocate` options gets; InvalidRequest
    naming the lease and the way out where the lease cannot cover it."""
    refs: Sequence[int | str] = options.get("gpus") or ()
    count = max(options.get("count") or 1, len(refs))
    memory, mig = options.get("memory_bytes"), options.get("mig_profile")
    fitting = [g for g in lease.gpus if _fits(g, memory, mig)]
    named = [g for g in fitting if _matches(g, refs)]
    chosen = (named + [g for g in fitting if g not in named])[:count]
    if len(chosen) < count or len(named) < len(refs):
        asked = _what(count, memory, mig) + (f" including {list(refs)}" if refs else "")
        raise InvalidRequest(
            f"this process runs under lease {lease.id} ({VARIABLE}), which holds "
            f"{len(fitting)} unit(s) that fit and cannot cover {asked}; ask for at most what "
            "it holds, or for a lease of its own: gpu_lease(..., nested='new') or "
            "`gpuallocctl run --nested new`",
            details={"lease_id": lease.id, "held": len(lease.gpus), "asked": count},
        )
    from dataclasses import replace  # only here: `import gpulease` does not load dataclasses

    return replace(lease, gpus=tuple(chosen))


def note(lease: Lease, part: Lease) -> str:
    """The one line that tells a nested block which lease it uses."""
    units = ", ".join(str(g.index) if g.kind == "whole" else g.uuid for g in part.gpus)
    return (
        f"gpulease: using the enclosing lease {lease.id} ({VARIABLE}): GPU(s) {units}; "
        "its holder renews and frees it (nested='new' takes a lease of its own)"
    )
