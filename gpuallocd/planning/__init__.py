"""Plan and simulate allocations offline: no daemon, only a topology and a policy."""

from __future__ import annotations

from gpuallocd.planning.plan import Plan, make_plan, make_unit_plan, parse_gpu_list
from gpuallocd.planning.simulate import Simulation, simulate
from gpuallocd.planning.slice_plans import parse_unit_list
from gpuallocd.planning.trace import TraceError, TraceOp, read_trace

__all__ = [
    "Plan",
    "Simulation",
    "TraceError",
    "TraceOp",
    "make_plan",
    "make_unit_plan",
    "parse_gpu_list",
    "parse_unit_list",
    "read_trace",
    "simulate",
]
