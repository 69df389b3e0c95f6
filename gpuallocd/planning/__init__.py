"""Plan and simulate allocations offline: no daemon, only a topology and a policy."""

from __future__ import annotations

from gpuallocd.planning.plan import Plan, make_plan, parse_gpu_list
from gpuallocd.planning.simulate import Simulation, simulate
from gpuallocd.planning.trace import TraceError, TraceOp, read_trace

__all__ = [
    "Plan",
    "Simulation",
    "TraceError",
    "TraceOp",
    "make_plan",
    "parse_gpu_list",
    "read_trace",
    "simulate",
]
