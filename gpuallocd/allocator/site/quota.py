"""A caller's use of the node held against the limits that apply to them.

Use is measured where it lives: GPUs held from the active leases, waiting requests from the
queue, and the use against budgets (allocator/site/budgets.py) from the user's running totals
in the ledger (read only when a budget applies, so a node without one pays nothing on a
grant; where one does, two or three index seeks, whatever the history).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gpuallocd.allocator.site.budgets import TotalsUse, check_budgets, use_in_window
from gpuallocd.allocator.site.limits import (
    BUDGETS,
    LIMIT_NAMES,
    AppliedLimits,
    Usage,
    check_grant,
    check_waiting,
    counts_apart,
    gpus_held,
    shares_held,
    units_weight,
)
from gpuallocd.allocator.site.rules import SiteRules
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller, Lease, LeasedGpu, UnitKind

__all__ = ["Quota"]


class Quota:
    """Measures use and checks requests against the site's limits (`rules` may be swapped)."""

    def __init__(self, ledger: Ledger, clock: Callable[[], float], rules: SiteRules) -> None:
        self._ledger = ledger
        self._clock = clock
        self.rules = rules

    def applied(self, caller: Caller) -> AppliedLimits:
        return self.rules.limits.applied(caller.user, caller.groups)

    def require_admin(self, caller: Caller, action: str, lease: str | None = None) -> None:
        """PermissionDenied unless the caller is an admin under the rules in force (rules.py)."""
        self.rules.require_admin(caller, action, lease)

    def usage(
        self,
        uid: int,
        active: Iterable[Lease],
        waiting: int = 0,
        *,
        with_budgets: bool = False,
        apart: bool = False,
    ) -> Usage:
        """`apart`: preemptible leases count apart from `max_gpus` (`counts_apart`)."""
        active = list(active)
        preemptible = [lease for lease in active if lease.preemptible is not None]
        held, held_preemptible = gpus_held(active, uid), gpus_held(preemptible, uid)
        return Usage(
            gpus=held - held_preemptible if apart else held,
            waiting=waiting,
            shares=len(shares_held(active, uid)),
            budgets=self._budget_use(uid) if with_budgets else {},
            preemptible_gpus=held_preemptible,
        )

    def budget_use(self, uid: int) -> TotalsUse:
        """`uid`'s use now, from their running totals (ledger/totals.py)."""
        return TotalsUse(lambda when: self._ledger.totals_at(uid, when), self._clock())

    def _budget_use(self, uid: int) -> dict[str, float]:
        found = self.budget_use(uid)
        return {name: use_in_window(found, *BUDGETS[name]) for name in BUDGETS}

    def _check_budgets(self, caller: Caller, applied: AppliedLimits) -> None:
        def source(name: str) -> str:
            return applied.sources[name]

        def use() -> TotalsUse:
            return self.budget_use(caller.uid)

        check_budgets(BUDGETS, applied.value, source, caller.user, use)

    def check_grant(
        self, caller: Caller, active: Iterable[Lease], *, gpus: float, preemptible: bool = False
    ) -> None:
        """QuotaExceeded when granting `gpus` to the caller would pass one of their limits."""
        applied = self.applied(caller)
        if all(value is None for value in applied.values.values()):
            return  # no limit at all applies (the common case): nothing to count
        usage = self.usage(caller.uid, active, apart=counts_apart(applied))
        check_grant(applied, usage, gpus=gpus, preemptible=preemptible)
        self._check_budgets(caller, applied)

    def check_units(
        self,
        caller: Caller,
        active: Iterable[Lease],
        units: Iterable[LeasedGpu],
        preemptible: bool = False,
    ) -> None:
        """`check_grant` for placed units (instances, partitions, shares): a share counts as
        its whole GPU (once per GPU the caller shares) and against `max_shares`."""
        applied = self.applied(caller)
        if all(value is None for value in applied.values.values()):
            return
        active = list(active)
        units = list(units)
        shared_already = {u.gpu_uuid for u in shares_held(active, caller.uid)}
        check_grant(
            applied,
            self.usage(caller.uid, active, apart=counts_apart(applied)),
            gpus=units_weight(units, shared_already),
            shares=sum(unit.kind is UnitKind.SHARE for unit in units),
            preemptible=preemptible,
        )
        self._check_budgets(caller, applied)

    def check_waiting(self, caller: Caller, waiting: int) -> None:
        check_waiting(self.applied(caller), waiting)

    def report(self, subject: Caller, active: Iterable[Lease], waiting: int) -> dict[str, Any]:
        """What `gpuallocctl limits` shows: each limit, where it was set, and the current use."""
        applied = self.applied(subject)
        apart = counts_apart(applied)
        usage = self.usage(subject.uid, active, waiting, with_budgets=True, apart=apart)
        return {
            "user": subject.user,
            "uid": subject.uid,
            "groups": sorted(subject.groups),
            "admin": self.rules.is_admin(subject),
            "limits": [
                {
                    "limit": name,
                    "value": applied.value(name),
                    "source": applied.sources[name],
                    "current": usage.current(name),
                    **_remaining(applied.value(name), usage.current(name)),
                }
                for name in LIMIT_NAMES
            ],
        }


def _remaining(value: float | None, current: float | None) -> dict[str, float]:
    """What is left of a limit that is set and counts a use (`max_gpus` as a budget:
    `limits`, its JSON and the MCP server show it; a TTL or a cap counts none)."""
    if value is None or current is None:
        return {}
    return {"remaining": max(0.0, value - current)}
