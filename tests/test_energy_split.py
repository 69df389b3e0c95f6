"""Who a GPU's energy is charged to, without a daemon: the rule at one sample (split.py), its
mean over the samples of an interval (presence.py), the meter's rows, and the words of a
power refusal. Uids here are plain numbers: the rule reads only the uid each process carries,
which the live sample took from the kernel (/proc/PID/status)."""

from __future__ import annotations

import pytest

from gpuallocd.allocator.power.budget import PowerBudget, unleased_words
from gpuallocd.allocator.power.energy import EnergyMeter
from gpuallocd.allocator.power.presence import Presence
from gpuallocd.allocator.power.split import holders_by_gpu, sample_parts, user_shares
from gpuallocd.model import GpuProcess, LiveState, PowerReading
from tests.test_energy_meter import QUARTER, WHOLE, lease

ALICE, BOB, CAROL = 1001, 1002, 1003
GIB = 2**30


def on(*processes: tuple[int, int | None, int | None]) -> tuple[GpuProcess, ...]:
    """Processes from (pid, uid, memory)."""
    return tuple(GpuProcess(pid, used, uid) for pid, uid, used in processes)


def test_a_holder_alone_pays_its_part_idle_included_and_nobody_else_pays() -> None:
    """No other user's process: a whole lease all of the GPU, its own processes or none; a
    share its fraction."""
    whole = holders_by_gpu([lease("w", WHOLE, uid=ALICE)])["GPU-a"]
    assert sample_parts((), whole).leases == {"w": 1.0}
    assert sample_parts(on((1, ALICE, GIB)), whole).leases == {"w": 1.0}
    share = holders_by_gpu([lease("s", QUARTER, uid=ALICE)])["GPU-b"]
    found = sample_parts(on((1, ALICE, GIB)), share)
    assert (found.leases, found.users) == ({"s": 0.25}, {})


def test_another_users_process_on_a_leased_gpu_takes_its_memory_share_from_the_holder() -> None:
    """bob on alice's idle GPU pays all of it; beside alice's 1 GiB his 3 GiB pay three
    quarters; the holder pays only her processes' share."""
    whole = holders_by_gpu([lease("w", WHOLE, uid=ALICE)])["GPU-a"]
    alone = sample_parts(on((2, BOB, GIB)), whole)
    assert (alone.leases, alone.users) == ({"w": 0.0}, {BOB: 1.0})
    both = sample_parts(on((1, ALICE, GIB), (2, BOB, 3 * GIB)), whole)
    assert (both.leases, both.users) == ({"w": 0.25}, {BOB: 0.75})


def test_a_share_holder_never_pays_more_because_another_user_came() -> None:
    """On a GPU a quarter leased to alice, bob's process beside hers: alice's part stays at
    most her quarter, bob pays his memory share, the rest is nobody's."""
    share = holders_by_gpu([lease("s", QUARTER, uid=ALICE)])["GPU-b"]
    found = sample_parts(on((1, ALICE, 3 * GIB), (2, BOB, GIB)), share)
    assert (found.leases, found.users) == ({"s": 0.25}, {BOB: 0.25})
    small = sample_parts(on((1, ALICE, GIB), (2, BOB, 9 * GIB)), share)
    assert (small.leases, small.users) == ({"s": 0.1}, {BOB: 0.9})


def test_many_small_processes_weigh_their_memory_not_their_number() -> None:
    """bob's twenty processes of 100 MiB weigh 2,000 MiB, carol's one of 2,000 MiB as much:
    more processes buy no smaller share; an owner the kernel could not name counts for
    nobody; memory NVML cannot tell splits evenly per user."""
    many = [(pid, BOB, 100 * 2**20) for pid in range(10, 30)]
    assert user_shares(on(*many, (2, CAROL, 2000 * 2**20))) == {BOB: 0.5, CAROL: 0.5}
    assert user_shares(on((1, None, 8 * GIB), (2, BOB, GIB))) == {BOB: 1.0}
    assert user_shares(on((1, ALICE, 8 * GIB), (2, BOB, None))) == {ALICE: 0.5, BOB: 0.5}


def test_an_interval_is_split_by_its_samples_not_by_the_last_one() -> None:
    """bob on alice's leased GPU for two samples of four, gone at the reading: he pays half,
    alice the idle half; a reading with no sample before it takes the latest sample."""
    held = [lease("w", WHOLE, uid=ALICE)]
    holders = holders_by_gpu(held)
    presence = Presence()
    for processes in (on((2, BOB, GIB)), on((2, BOB, GIB)), (), ()):
        presence.sampled({"GPU-a": LiveState(processes=processes)}, holders)
    found = presence.take("GPU-a", holders["GPU-a"]).parts()
    assert (found.leases, found.users) == ({"w": 0.5}, {BOB: 0.5})
    presence.sampled({"GPU-a": LiveState(processes=on((2, BOB, GIB)))}, holders)
    presence.take("GPU-a", holders["GPU-a"])
    again = presence.take("GPU-a", holders["GPU-a"]).parts()
    assert (again.leases, again.users) == ({"w": 0.0}, {BOB: 1.0})


def cached(mj: dict[str, int]) -> EnergyMeter:
    """A meter whose cache of counters (the last sample's) is `mj`."""
    meter = EnergyMeter(enabled=True)
    meter.counters = mj
    return meter


def test_the_meter_charges_the_holder_and_the_other_user_their_parts_in_one_reading() -> None:
    """A reading of alice's GPU with bob's 3 GiB beside her 1 GiB: her lease's row has a
    quarter, bob's unleased row three quarters of the energy and of the time, both
    estimates; a free GPU bob used alone gives him all of it, measured."""
    mj = {"GPU-a": 0, "GPU-c": 0}
    meter = cached(mj)
    held = [lease("w", WHOLE, uid=ALICE)]
    sample = {
        "GPU-a": LiveState(processes=on((1, ALICE, GIB), (2, BOB, 3 * GIB))),
        "GPU-c": LiveState(processes=on((3, BOB, GIB))),
    }
    meter.sampled(sample, held)
    assert meter.reading(held, ["GPU-a", "GPU-c"], 1.0) == []  # baselines
    meter.sampled(sample, held)
    mj.update({"GPU-a": 400_000, "GPU-c": 100_000})
    uses = meter.reading(held, ["GPU-a", "GPU-c"], 61.0)
    rows = [(u.lease_id, u.owner_uid, u.joules, u.estimate, u.gpu_seconds) for u in uses]
    assert rows == [
        ("w", ALICE, 100.0, True, 0.0),
        (None, BOB, 300.0, True, 45.0),
        (None, BOB, 100.0, False, 60.0),
    ]


def test_a_grant_elsewhere_keeps_the_baseline_of_a_gpu_someone_uses_without_a_lease() -> None:
    """bob on free GPU c; a reading of another GPU (a grant) in between does not drop GPU
    c's baseline: the timer's next reading charges bob all the energy since."""
    mj = {"GPU-a": 0, "GPU-c": 0}
    meter = cached(mj)
    sample = {"GPU-c": LiveState(processes=on((3, BOB, GIB)))}
    meter.sampled(sample, [])
    assert meter.reading([], ["GPU-c"], 0.0) == []
    mj["GPU-c"] = 50_000
    meter.reading([], ["GPU-a"], 5.0)  # a grant of GPU a
    meter.sampled(sample, [])
    mj["GPU-c"] = 90_000
    (use,) = meter.reading([], ["GPU-c"], 10.0)
    assert (use.owner_uid, use.joules, use.estimate) == (BOB, 90.0, False)


def test_a_refusal_names_who_draws_without_a_lease_escaped_and_bounded() -> None:
    """One user: `by bob on GPU 2`; several: each with their watts, the most first, four or
    more counted, not named; a name a terminal would act on is escaped."""
    names = {BOB: "bob", CAROL: "carol\x1b[2J", 7: "dan", 8: "erin"}
    assert (
        unleased_words({BOB: (384_000.0, [2])}, names.__getitem__)
        == "384 W drawn without a lease by bob on GPU 2"
    )
    several = {
        BOB: (300_000.0, [2, 3]),
        CAROL: (400_000.0, [4]),
        7: (10_000.0, [5]),
        8: (5_000.0, [6]),
    }
    assert unleased_words(several, names.__getitem__) == (
        "715 W drawn without a lease: 400 W by carol\\x1b[2J on GPU 4, "
        "300 W by bob on GPUs 2, 3, 10 W by dan on GPU 5, and 1 more user(s)"
    )


def test_the_committed_watts_are_told_apart_by_leases_unleased_and_idle() -> None:
    """Budget's words: the leases' caps or limits, what users draw on free GPUs by their
    memory shares, and the idle free GPUs."""

    budget = PowerBudget(600, "wait")
    budget.readings = {  # the power timer's last reading
        "GPU-a": PowerReading(draw_mw=50_000, default_limit_mw=300_000),
        "GPU-c": PowerReading(draw_mw=280_000, default_limit_mw=300_000),
        "GPU-d": PowerReading(draw_mw=43_000, default_limit_mw=300_000),
    }
    drawers = {"GPU-c": (2, {BOB: 0.75, CAROL: 0.25}), "GPU-d": (3, {})}
    words = budget.committed_words([lease("w", WHOLE)], {}, drawers)
    assert words.startswith("300 W by leases, 280 W drawn without a lease: 210 W by ")
    assert words.endswith(" on GPU 2, 43 W idle")
    assert pytest.approx(budget.committed_mw([lease("w", WHOLE)], {})) == 623_000
