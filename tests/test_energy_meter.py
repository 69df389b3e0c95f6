"""Energy and budgets without a daemon: the meter's arithmetic (splitting a GPU's energy,
reloads, restarts, no counter) over the counters the last sample read, a budget's window."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuallocd.allocator.power.energy import EnergyMeter, charges
from gpuallocd.allocator.power.split import Parts
from gpuallocd.allocator.site.budgets import TotalsUse, frees_at, use_in_window
from gpuallocd.ledger import Ledger
from gpuallocd.model import Lease, LeasedGpu, LeaseState, LiveState, UnitKind
from gpuallocd.model.energy import EnergyUse


def lease(lease_id: str, *units: LeasedGpu, uid: int = 1000) -> Lease:
    return Lease(
        id=lease_id,
        gpus=units,
        owner_uid=uid,
        owner_name=f"u{uid}",
        pid=None,
        label=None,
        policy="simple",
        created_at=0.0,
        expires_at=3600.0,
        state=LeaseState.ACTIVE,
    )


WHOLE = LeasedGpu("GPU-a", 0)
QUARTER = LeasedGpu("GPU-b", 1, kind=UnitKind.SHARE, memory_bytes=1, fraction=0.25)


class Counters:
    """Energy counters the test sets, in millijoules, as the last live sample read them."""

    def __init__(self, **counters: int | None) -> None:
        self.counters = {f"GPU-{k}": v for k, v in counters.items() if v is not None}

    def meter(self) -> EnergyMeter:
        """A meter whose cache is these counters."""
        meter = EnergyMeter(enabled=True)
        meter.counters = self.counters
        return meter


def test_a_whole_gpu_gets_all_of_its_energy_and_a_share_its_fraction_as_an_estimate() -> None:
    """The split: whole GPUs measured, a share its fraction of the GPU, labelled estimate."""
    counters = Counters(a=0, b=0)
    meter = counters.meter()
    held = [lease("w", WHOLE), lease("s", QUARTER)]
    meter.reading(held, ["GPU-a", "GPU-b"], 1.0)
    counters.counters.update({"GPU-a": 100_000, "GPU-b": 400_000})
    uses = meter.reading(held, ["GPU-a", "GPU-b"], 5.0)
    assert [(u.lease_id, u.joules, u.estimate, u.at) for u in uses] == [
        ("w", 100.0, False, 5.0),
        ("s", 100.0, True, 5.0),
    ]


def test_a_counter_that_goes_back_is_a_reload_not_negative_energy() -> None:
    """After a reload only what the counter counted since is taken."""
    counters = Counters(a=5_000_000)
    meter = counters.meter()
    held = [lease("w", WHOLE)]
    assert meter.reading(held, ["GPU-a"], 1.0) == []  # the first reading: a baseline only
    counters.counters["GPU-a"] = 7_000_000
    assert [u.joules for u in meter.reading(held, ["GPU-a"], 2.0)] == [2000.0]
    counters.counters["GPU-a"] = 300_000  # the driver reloaded
    assert [u.joules for u in meter.reading(held, ["GPU-a"], 3.0)] == [300.0]


def test_a_restarted_meter_starts_again_and_loses_only_the_interval_it_missed() -> None:
    """A new meter (a daemon restart) takes a baseline, then counts from there."""
    counters = Counters(a=10_000_000)
    meter = counters.meter()
    held = [lease("w", WHOLE)]
    assert meter.reading(held, ["GPU-a"], 1.0) == []
    counters.counters["GPU-a"] = 11_000_000
    assert [u.joules for u in meter.reading(held, ["GPU-a"], 2.0)] == [1000.0]


def test_no_counter_or_an_unreadable_gpu_gives_no_energy_and_never_raises() -> None:
    """A GPU older than Volta records nothing; a sample that could not read a GPU keeps its
    last counter (no energy made up); accounting off reads nothing; grants go on."""
    counters = Counters(a=None)
    meter = counters.meter()
    held = [lease("w", WHOLE)]
    assert meter.reading(held, ["GPU-a"], 1.0) == [] == meter.reading(held, ["GPU-a"], 2.0)
    counters.counters["GPU-a"] = 5_000
    meter.sampled({"GPU-a": LiveState(healthy=False, health_reason="GPU cannot be read")}, held)
    assert meter.counters["GPU-a"] == 5_000
    meter.reading(held, ["GPU-a"], 3.0)
    assert [u.joules for u in meter.reading(held, ["GPU-a"], 4.0)] == [0.0]
    off = EnergyMeter(enabled=False)
    off.sampled({"GPU-a": LiveState(energy_mj=9)}, held)
    assert not off.enabled and off.counters == {} and off.read(held, held, 5.0) is None


def test_a_gpu_nobody_holds_loses_its_baseline() -> None:
    """Once no active lease holds a GPU, its next reading starts over (no stale baseline)."""
    counters = Counters(a=1_000_000)
    meter = counters.meter()
    meter.reading([lease("w", WHOLE)], ["GPU-a"], 1.0)
    counters.counters["GPU-a"] = 9_000_000
    meter.reading([], [], 2.0)  # a timer's reading with no lease on GPU-a
    assert meter.reading([lease("x", WHOLE)], ["GPU-a"], 3.0) == []


def test_unleased_use_of_several_owners_is_split_by_their_memory_as_an_estimate() -> None:
    """One owner gets the GPU's energy and time; two share them by memory, an estimate."""
    drawn = {"GPU-a": (1000.0, 60.0), "GPU-b": (400.0, 60.0)}
    parts = {"GPU-a": Parts(users={7: 1.0}), "GPU-b": Parts(users={7: 0.75, 8: 0.25})}
    uses = charges(drawn, parts, [], 5.0, name_of=lambda uid: f"u{uid}")
    assert [(u.owner_uid, u.joules, u.gpu_seconds, u.estimate, u.lease_id) for u in uses] == [
        (7, 1000.0, 60.0, False, None),
        (7, 300.0, 45.0, True, None),
        (8, 100.0, 15.0, True, None),
    ]


def test_a_budget_frees_up_when_enough_use_leaves_its_window(tmp_path: Path) -> None:
    """kWh in a window add up the readings inside it; `frees_at` is when the use falls below
    the budget if nothing more is used (readings recorded in any order)."""
    day = 86400.0
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    for at in (1000.0, 500.0, 2000.0):  # 1 kWh each
        ledger.record_energy([EnergyUse("x", 7, "u7", at, 3.6e6, False)])
    found = TotalsUse(lambda when: ledger.totals_at(7, when), now=2500.0)
    assert use_in_window(found, "kwh", day) == 3.0
    assert found.use("kwh", 600.0, 2500.0) == 2.0
    assert frees_at(found, "kwh", day, 2.5) == pytest.approx(500.0 + day, abs=1.0)
    assert frees_at(found, "kwh", day, 1.0) == pytest.approx(2000.0 + day, abs=1.0)
    ledger.close()
