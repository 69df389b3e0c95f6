"""The rules every allocation obeys, in one place: what a valid request is, and what a policy
may answer. The daemon's allocator, every built-in policy, `plan` and `simulate` all call these.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuallocd.errors import CountExceedsNode, InternalError, InvalidRequest, UnknownGpu
from gpuallocd.model import Topology
from gpuallocd.policies.base import AllocationRequest, Choice, NodeSnapshot

__all__ = ["check_choice", "check_request", "request_for"]


def request_for(
    topology: Topology,
    count: int | None,
    gpus: Sequence[int | str] = (),
    min_free_memory_bytes: int | None = None,
) -> AllocationRequest:
    """A checked request: GPU references resolved to UUIDs, `count` defaulting to their number."""
    required = topology.resolve_all(gpus)
    request = AllocationRequest(
        count=len(required) if count is None else count,
        required=required,
        min_free_memory_bytes=min_free_memory_bytes,
    )
    check_request(topology, request)
    return request


def check_request(topology: Topology, request: AllocationRequest) -> None:
    """The request makes sense for this node: a count >= 1 that covers distinct known GPUs."""
    if request.count < 1:
        raise InvalidRequest(f"count must be at least 1, not {request.count}", field="count")
    if len(set(request.required)) != len(request.required):
        raise InvalidRequest("a GPU is named twice", field="gpus")
    known = topology.by_uuid()
    for uuid in request.required:
        if uuid not in known:
            raise UnknownGpu(f"no GPU {uuid!r} on {topology.name}", gpu=uuid)
    if request.count < len(request.required):
        raise InvalidRequest(
            f"count {request.count} is less than the {len(request.required)} GPU(s) named",
            field="count",
        )
    if request.count > len(topology.gpus):
        raise CountExceedsNode(
            f"{request.count} GPU(s) asked for; the node has {len(topology.gpus)}",
            count=request.count,
            node_gpus=len(topology.gpus),
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
