"""Allocation policies: pure choices over a snapshot of the node."""

from __future__ import annotations

from gpuallocd.policies.base import AllocationRequest, Choice, GpuView, NodeSnapshot, Policy
from gpuallocd.policies.registry import available_policies, get_policy

__all__ = [
    "AllocationRequest",
    "Choice",
    "GpuView",
    "NodeSnapshot",
    "Policy",
    "available_policies",
    "get_policy",
]
