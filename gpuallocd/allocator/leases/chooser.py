"""The checked choice of a policy for one request over the node's snapshot: a whole-GPU
request by its policy (cached per node state), shares and MIG instances by their placer."""

from __future__ import annotations

from collections.abc import Iterable

from gpuallocd.allocator.leases.choices import ChoiceCache
from gpuallocd.allocator.leases.node_view import NodeView
from gpuallocd.allocator.leases.slices import place_units
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.model import Lease
from gpuallocd.policies import AllocationRequest, Choice, Policy, get_policy
from gpuallocd.policies.rules import check_choice

__all__ = ["Chooser"]


class Chooser:
    """Asks the policy (the request's, else the default) and checks what it chose."""

    def __init__(self, node: NodeView, default_policy: str) -> None:
        self._node = node
        self._default = default_policy
        self._policies: dict[str, Policy] = {}
        self._choices = ChoiceCache()
        self._policy(default_policy)  # fail at start, not at the first request

    def choose(
        self,
        active: Iterable[Lease],
        spec: AllocateSpec,
        request: AllocationRequest,
        unavailable: frozenset[str],
    ) -> tuple[str, Choice]:
        """The policy's name and its checked choice, with `unavailable` GPUs busy."""
        state, snapshot = self._node.keyed_snapshot(active, unavailable)
        if request.kind != "whole":
            return place_units(snapshot, request, spec.policy)
        name = spec.policy or self._default
        choice = self._choices.choose(name, self._policy(name), state, snapshot, request)
        check_choice(name, choice, request, snapshot)
        return name, choice

    def _policy(self, name: str) -> Policy:
        if name not in self._policies:
            self._policies[name] = get_policy(name)
        return self._policies[name]
