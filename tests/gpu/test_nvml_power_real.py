"""Energy counter, draw and power limits of this machine's real GPUs.

Reads only: a power limit is set (and put back) only where GPUALLOCD_GPU_TEST_SET_POWER=1,
so a machine lent for a test keeps its settings.
"""

from __future__ import annotations

import os
import time

import pytest

from gpuallocd.inventory.nvml.backend import NvmlInventory

pytestmark = pytest.mark.gpu

SET_POWER = "GPUALLOCD_GPU_TEST_SET_POWER"


def test_counter_draw_and_constraints_read_as_nvidia_smi_would(
    real_inventory: NvmlInventory,
) -> None:
    """Each GPU has a draw within its limits; the counter does not go back over a second."""
    first = real_inventory.power()
    assert first, "no GPU gave a power reading"
    time.sleep(1.0)
    second = real_inventory.power()
    for uuid, reading in first.items():
        assert reading.draw_mw is not None and reading.draw_mw > 0, uuid
        assert reading.min_limit_mw is not None and reading.max_limit_mw is not None
        assert reading.min_limit_mw <= (reading.limit_mw or 0) <= reading.max_limit_mw
        if reading.energy_mj is not None:
            later = second[uuid].energy_mj
            assert later is not None and later >= reading.energy_mj


@pytest.mark.skipif(
    os.environ.get(SET_POWER) != "1", reason=f"sets a power limit: needs {SET_POWER}=1"
)
def test_a_limit_set_within_constraints_takes_and_is_put_back(
    real_inventory: NvmlInventory,
) -> None:
    """The lowest allowed limit takes on GPU 0; the previous one is restored after."""
    uuid, reading = next(iter(real_inventory.power().items()))
    assert reading.limit_mw is not None and reading.min_limit_mw is not None
    real_inventory.set_power_limit(uuid, reading.min_limit_mw)
    try:
        assert real_inventory.power([uuid])[uuid].limit_mw == reading.min_limit_mw
    finally:
        real_inventory.set_power_limit(uuid, reading.limit_mw)
    assert real_inventory.power([uuid])[uuid].limit_mw == reading.limit_mw
