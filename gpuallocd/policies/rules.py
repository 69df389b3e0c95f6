"""The rules every allocation obeys, in one place: what a valid request is, and what a policy
may answer. The daemon's allocator, every built-in policy, `plan` and `simulate` all call these.

Three kinds of request: whole GPUs; MIG instances (`mig_profile`, or `MIG-` UUIDs named);
memory shares (`memory_bytes` on each of `count` shared GPUs). A request is one kind only.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuallocd.errors import CountExceedsNode, InternalError, InvalidRequest, UnknownGpu
from gpuallocd.model import Gpu, Topology
from gpuallocd.policies.base import AllocationRequest, Choice, NodeSnapshot
from gpuallocd.policies.shares import format_gib

__all__ = [
    "check_choice",
    "check_request",
    "check_unit_choice",
    "request_for",
    "requested_count",
]


def requested_count(
    count: int | None,
    gpus: Sequence[int | str] | None,
    memory_bytes: int | None,
    mig_profile: str | None,
) -> int | None:
    """The count an allocate asks for, before it meets a node: the daemon's API and
    `simulate`'s traces both read a request through this.

    Something must be asked for: a count, GPUs, a share or a MIG profile. A share or a
    profile alone is one of it; GPUs alone are as many as named (None: `request_for` counts
    them). A count below 1, or below the number of GPUs named, is refused.
    """
    if count is None and not gpus:
        if memory_bytes is None and mig_profile is None:
            raise InvalidRequest(
                "give a count, or the GPUs to lease (or a memory share or MIG profile)",
                field="count",
            )
        return 1  # one share, or one instance of the profile
    if count is not None and count < 1:
        raise InvalidRequest(f"count must be at least 1, not {count}", field="count")
    if count is not None and gpus and count < len(gpus):
        raise InvalidRequest(
            f"count {count} is less than the {len(gpus)} GPU(s) named", field="count"
        )
    return count


def request_for(
    topology: Topology,
    count: int | None,
    gpus: Sequence[int | str] = (),
    min_free_memory_bytes: int | None = None,
    *,
    memory_bytes: int | None = None,
    mig_profile: str | None = None,
) -> AllocationRequest:
    """A checked request: references resolved to UUIDs, `count` defaulting to their number.

    `MIG-` UUIDs name instances (a slice request); every other reference names a GPU.
    """
    instances = topology.instances()
    named_slices = [str(ref) for ref in gpus if str(ref) in instances]
    if named_slices and len(named_slices) != len(gpus):
        raise InvalidRequest("name MIG instances or GPUs, not both", field="gpus")
    required = tuple(named_slices) if named_slices else topology.resolve_all(gpus)
    request = AllocationRequest(
        count=len(required) if count is None else count,
        required=required,
        min_free_memory_bytes=min_free_memory_bytes,
        memory_bytes=memory_bytes,
        mig_profile=mig_profile,
        slices=bool(named_slices),
    )
    check_request(topology, request)
    return request


def check_request(topology: Topology, request: AllocationRequest) -> None:
    """The request makes sense for this node: a count >= 1 that covers distinct known units."""
    if request.count < 1:
        raise InvalidRequest(f"count must be at least 1, not {request.count}", field="count")
    if len(set(request.required)) != len(request.required):
        raise InvalidRequest("a GPU is named twice", field="gpus")
    if request.count < len(request.required):
        raise InvalidRequest(
            f"count {request.count} is less than the {len(request.required)} GPU(s) named",
            field="count",
        )
    if request.memory_bytes is not None and request.mig_profile is not None:
        raise InvalidRequest("ask for a memory share or a MIG profile, not both", field="memory")
    if request.kind == "mig":
        _check_slice_request(topology, request)
        return
    known = topology.by_uuid()
    for uuid in request.required:
        if uuid not in known:
            raise UnknownGpu(f"no GPU {uuid!r} on {topology.name}", gpu=uuid)
        if known[uuid].mig_mode:
            raise InvalidRequest(
                f"GPU {known[uuid].index} is in MIG mode: lease its instances "
                "(a MIG profile, or their MIG- UUIDs)",
                field="gpus",
            )
    if request.kind == "share":
        _check_share_request(request)
    whole = [g for g in topology.gpus if not g.mig_mode]
    if request.count > len(whole):
        raise CountExceedsNode(
            f"{request.count} GPU(s) asked for; the node has {len(whole)} "
            f"(GPUs in MIG mode lease by instance)",
            count=request.count,
            node_gpus=len(whole),
        )
    _check_memory_floor(whole, request)


def _check_memory_floor(whole: Sequence[Gpu], request: AllocationRequest) -> None:
    """Refuse at once a request whose `min_free_memory_bytes` fewer than `count` GPUs have in
    all (their memory known): no end of any lease could serve it, so it must not wait."""
    floor = request.min_free_memory_bytes
    if floor is None:
        return
    big = [g for g in whole if g.memory_total_bytes is None or g.memory_total_bytes >= floor]
    small = [g for g in whole if g.uuid in request.required and g not in big]
    if small:
        has, asked = _sizes(small[0].memory_total_bytes or 0, floor)
        raise CountExceedsNode(
            f"GPU {small[0].index} has {has} of memory in all, less than the {asked} asked free",
            count=request.count,
            node_gpus=len(big),
        )
    if request.count <= len(big):
        return
    largest = max((g.memory_total_bytes or 0 for g in whole), default=0)
    has, asked = _sizes(largest, floor)
    raise CountExceedsNode(
        f"{request.count} GPU(s) with {asked} of memory free asked for; the node has "
        f"{len(big)} with that much memory in all (the largest has {has})",
        count=request.count,
        node_gpus=len(big),
    )


def _sizes(has: int, asked: int) -> tuple[str, str]:
    """Two sizes in GiB, or in bytes where GiB would show them the same (31.7 GiB less than
    31.7 GiB says nothing)."""
    if format_gib(has) != format_gib(asked):
        return format_gib(has), format_gib(asked)
    return f"{has:,} bytes", f"{asked:,} bytes"


def _check_share_request(request: AllocationRequest) -> None:
    if request.memory_bytes is None or request.memory_bytes < 1:
        raise InvalidRequest("a memory share must be at least 1 byte", field="memory_bytes")
    if request.min_free_memory_bytes is not None:
        raise InvalidRequest(
            "a memory share reserves its memory; min_free_memory_bytes does not apply",
            field="min_free_memory_bytes",
        )


def _check_slice_request(topology: Topology, request: AllocationRequest) -> None:
    instances = topology.instances()
    profiles = sorted({m.profile for _, m in instances.values() if m.profile})
    if request.mig_profile is not None and request.mig_profile not in profiles:
        raise InvalidRequest(
            f"no MIG instance of profile {request.mig_profile!r} on {topology.name} "
            f"(profiles: {', '.join(profiles) or 'none: no GPU is in MIG mode'})",
            field="mig_profile",
        )
    for uuid in request.required:
        if uuid not in instances:
            raise UnknownGpu(f"no MIG instance {uuid!r} on {topology.name}", gpu=uuid)
        profile = instances[uuid][1].profile
        if request.mig_profile is not None and profile != request.mig_profile:
            raise InvalidRequest(
                f"MIG instance {uuid} is a {profile}, not a {request.mig_profile}",
                field="gpus",
            )
    matching = [u for u, (_, m) in instances.items() if request.mig_profile in (None, m.profile)]
    if request.count > len(matching):
        raise CountExceedsNode(
            f"{request.count} MIG instance(s) of {request.mig_profile or 'any profile'} "
            f"asked for; the node has {len(matching)}",
            count=request.count,
            node_gpus=len(matching),
        )


def check_choice(
    policy_name: str, choice: Choice, request: AllocationRequest, snapshot: NodeSnapshot
) -> None:
    """A policy is code we may not own: never record a choice that breaks the rules.

    The choice has exactly the count asked for, no GPU twice, every required GPU, and only
    GPUs the snapshot shows free.
    """
    picked = choice.gpus
    broken = (
        len(picked) != request.count
        or len(set(picked)) != len(picked)
        or not set(request.required) <= set(picked)
        or any(u not in snapshot.views or not snapshot.views[u].free for u in picked)
    )
    if broken:
        raise InternalError(f"policy {policy_name} returned an invalid choice", gpus=list(picked))


def check_unit_choice(choice: Choice, request: AllocationRequest, snapshot: NodeSnapshot) -> None:
    """A choice of slices or shares keeps the rules: the count asked for, distinct units,
    every required one; free instances of the profile; shares that fit their GPU's room."""
    picked = choice.gpus
    broken = (
        len(picked) != request.count
        or len(set(picked)) != len(picked)
        or not set(request.required) <= set(picked)
    )
    if request.kind == "mig":
        instances = snapshot.topology.instances()
        broken = broken or any(
            u not in instances
            or u in snapshot.busy_units
            or request.mig_profile not in (None, instances[u][1].profile)
            for u in picked
        )
    else:
        need = request.memory_bytes or 0
        broken = broken or any(snapshot.share_room(u) < need for u in picked)
    if broken:
        raise InternalError(f"the {request.kind} placement broke the rules", gpus=list(picked))
