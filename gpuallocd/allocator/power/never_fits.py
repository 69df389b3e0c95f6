"""A request the power budget could never serve, refused at once with the cap that would fit.

On an idle box (nothing leased, every other GPU at its idle draw: the lowest draw read of it
since the daemon started) a request commits its GPUs' wanted watts (the cap asked for, or
each card's default limit) plus the others' idle draw. Where that is over the budget, no wait
can serve it: it is refused with `over_power_budget`, and the answer names the largest cap
per GPU that fits, within every card's range (at or above its lowest limit): one that would
be granted now, else one that fits once the other GPUs are idle, else that even the cards'
lowest limit does not fit. With `power_fit = "cap"` the daemon caps a request itself, so
it is refused only where even the cards' lowest limit could never fit.

Pure: it reads the figures the budget holds (the power timer's, off the event loop).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuallocd.errors import OverPowerBudget
from gpuallocd.model import PowerReading

__all__ = ["Request", "check_ever_fits"]


@dataclass(frozen=True, slots=True)
class Request:
    """What a grant would add: its GPUs not leased yet, what each would commit, the cap asked
    (None: the cards' defaults), whether a cap can be set on them (whole GPUs only), and the
    watts per GPU left now."""

    gpus: Sequence[str]
    wanted_mw: Sequence[int]
    asked_watts: float | None
    cappable: bool
    per_gpu_now_mw: int


def _watts(mw: float) -> str:
    return f"{mw / 1000:,.0f} W"


def _lowest_mw(readings: Mapping[str, PowerReading], gpus: Sequence[str]) -> int | None:
    """The lowest cap every card of `gpus` accepts (None where a card cannot say)."""
    lows = [readings[u].min_limit_mw if u in readings else None for u in gpus]
    known = [low for low in lows if low is not None]
    return max(known) if known and len(known) == len(lows) else None


def _what(request: Request) -> str:
    """`4 GPUs at their default 300 W commit 1,200 W`."""
    n, total = len(request.gpus), sum(request.wanted_mw)
    gpus = "1 GPU" if n == 1 else f"{n} GPUs"
    if request.asked_watts is not None:
        at = f"at the {request.asked_watts:g} W asked"
    elif len(set(request.wanted_mw)) == 1:
        at = f"at {'its' if n == 1 else 'their'} default {_watts(request.wanted_mw[0])}"
    else:
        at = "at their default limits"
    return f"{gpus} {at} commit{'s' if n == 1 else ''} {_watts(total)}"


def check_ever_fits(
    request: Request,
    readings: Mapping[str, PowerReading],
    idle_mw: Mapping[str, int],
    budget_mw: int,
    fit: str,
) -> None:
    """Raise OverPowerBudget where `request` could not fit `budget_mw` even on an idle box."""
    others = sum(mw for uuid, mw in idle_mw.items() if uuid not in request.gpus)
    n = len(request.gpus)
    lowest = _lowest_mw(readings, request.gpus) if request.cappable else None
    least = n * lowest if fit == "cap" and lowest is not None else sum(request.wanted_mw)
    if others + least <= budget_mw:
        return  # it fits once the box is idle enough: the request waits
    per_gpu_idle = (budget_mw - others) // n
    fitting: int | None = None
    if lowest is None:
        tail = "a GPU shared or in MIG instances takes no power cap: ask for fewer GPUs"
    elif request.per_gpu_now_mw >= lowest:
        fitting = request.per_gpu_now_mw // 1000
        tail = f"--power-limit {fitting}W would be granted now"
    elif per_gpu_idle >= lowest:
        fitting = per_gpu_idle // 1000
        tail = f"--power-limit {fitting}W fits once the other GPUs are idle"
    else:
        tail = (
            f"even the cards' lowest limit ({_watts(lowest)} each, {_watts(n * lowest)}) "
            "does not fit: ask for fewer GPUs"
        )
    committed = others + sum(request.wanted_mw)
    idle = f" ({_watts(committed)} with the other GPUs at their idle draw)" if others else ""
    raise OverPowerBudget(
        f"{_what(request)}{idle}, over the {_watts(budget_mw)} power budget even with nothing "
        f"else leased; {tail}",
        count=n,
        budget_watts=budget_mw / 1000,
        committed_watts=committed / 1000,
        fitting_power_limit_watts=fitting,
    )
