"""Power through the NVML inventory: energy counters, draw, limits, and setting a limit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuallocd.errors import NvmlError
from gpuallocd.inventory.base import PowerMetering
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.inventory.nvml.gate import NvmlCode, nvml_code
from gpuallocd.testing import FakeNvml, load_recording


class _Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def volta() -> Iterator[tuple[NvmlInventory, FakeNvml, _Clock]]:
    clock = _Clock()
    fake = FakeNvml.from_recording("dgx1-volta", clock=clock)
    inventory = NvmlInventory(nvml=fake, name=fake.name, xid_wait_ms=20)
    yield inventory, fake, clock
    inventory.close()


def test_the_inventory_reads_counter_draw_and_limits_through_the_gate(
    volta: tuple[NvmlInventory, FakeNvml, _Clock],
) -> None:
    """Every whole GPU's power, in NVML's units; the fake counted the calls it answered."""
    inventory, fake, clock = volta
    assert isinstance(inventory, PowerMetering)
    first = inventory.power()
    assert set(first) == set(fake.uuids())
    reading = first[fake.uuids()[2]]
    assert (reading.draw_mw, reading.limit_mw, reading.default_limit_mw) == (
        43_000,
        300_000,
        300_000,
    )
    assert (reading.min_limit_mw, reading.max_limit_mw) == (150_000, 300_000)
    clock.now += 60
    later = inventory.power([fake.uuids()[2]])
    assert set(later) == {fake.uuids()[2]}
    assert later[fake.uuids()[2]].energy_mj == (reading.energy_mj or 0) + 60 * 43_000
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 9


def test_setting_a_limit_within_the_constraints_takes_and_outside_is_refused(
    volta: tuple[NvmlInventory, FakeNvml, _Clock],
) -> None:
    """A limit in range is the card's; out of range is NvmlError INVALID_ARGUMENT."""
    inventory, fake, _ = volta
    uuid = fake.uuids()[0]
    inventory.set_power_limit(uuid, 200_000)
    assert inventory.power([uuid])[uuid].limit_mw == 200_000
    with pytest.raises(NvmlError) as refused:
        inventory.set_power_limit(uuid, 100_000)
    assert nvml_code(refused.value) == NvmlCode.INVALID_ARGUMENT
    with pytest.raises(NvmlError):
        inventory.set_power_limit("GPU-not-here", 200_000)


def test_a_gpu_without_an_energy_counter_reads_none_for_it() -> None:
    """Before Volta NVML cannot count energy: the reading says None, not 0."""
    recording = load_recording("h200-single")
    del recording["devices"][0]["energy_counter_mj"]
    fake = FakeNvml(recording)
    inventory = NvmlInventory(nvml=fake, name="old", xid_wait_ms=20)
    try:
        (reading,) = inventory.power().values()
        assert reading.energy_mj is None and reading.draw_mw == 76_000
    finally:
        inventory.close()


def test_a_lost_gpu_is_left_out_of_the_power_readings(
    volta: tuple[NvmlInventory, FakeNvml, _Clock],
) -> None:
    """A GPU that fell off the bus has no reading; the others still have theirs."""
    inventory, fake, _ = volta
    fake.lose_gpu(fake.uuids()[5])
    assert set(inventory.power()) == set(fake.uuids()) - {fake.uuids()[5]}


def test_a_driver_reload_in_the_live_file_restarts_counters_and_limits(
    volta: tuple[NvmlInventory, FakeNvml, _Clock], tmp_path: Path
) -> None:
    """`driver_reload` in the live file replays a reload once: counters from 0, default limits."""
    inventory, fake, clock = volta
    uuid = fake.uuids()[3]
    inventory.set_power_limit(uuid, 180_000)
    live = tmp_path / "live.json"
    live.write_text(json.dumps({uuid: {"utilization_gpu_percent": 100}}))
    fake.follow_live_file(live)
    inventory.sample()
    clock.now += 1
    assert inventory.power([uuid])[uuid].draw_mw == 180_000
    live.write_text(
        json.dumps({uuid: {"utilization_gpu_percent": 100}, "driver_reload": [{"seq": 1}]})
    )
    reloaded = inventory.power([uuid])[uuid]
    assert reloaded.energy_mj == 0 and reloaded.limit_mw == 300_000
    clock.now += 2
    inventory.sample()
    assert inventory.power([uuid])[uuid].energy_mj == 600_000  # delivered once, not again


def test_the_energy_read_asks_only_for_the_counter(
    volta: tuple[NvmlInventory, FakeNvml, _Clock],
) -> None:
    """The meter's read is one NVML call per GPU: the counter, nothing else."""
    inventory, fake, _ = volta
    before = sum(fake.calls.values())
    (reading,) = inventory.energy([fake.uuids()[0]]).values()
    assert reading.energy_mj == 7_000_000_000 and reading.draw_mw is None
    assert sum(fake.calls.values()) - before == 1
