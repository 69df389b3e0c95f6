"""The fake NVML stays honest: it has exactly what the backend calls, as real pynvml has it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pynvml
import pytest

import gpuallocd.inventory.nvml.api as nvml_api
import gpuallocd.inventory.nvml.gate as nvml_gate
from gpuallocd.testing import FakeNvml, load_recording
from gpuallocd.testing.fake_nvml import FakeHandle

_USES = re.compile(r'(?:call|constant)\(\s*"(\w+)"|_lib\.(\w+)')


def used_names() -> set[str]:
    """Every pynvml attribute the gate and the typed API reach."""
    names: set[str] = set()
    for module in (nvml_gate, nvml_api):
        source = Path(inspect.getfile(module)).read_text()
        names.update(a or b for a, b in _USES.findall(source))
    return names


def _parameters(function: object) -> list[tuple[str, bool]]:
    """(name, has a default) of each parameter."""
    signature = inspect.signature(function)  # type: ignore[arg-type]
    return [(p.name, p.default is not p.empty) for p in signature.parameters.values()]


def test_the_backend_uses_the_expected_nvml_surface() -> None:
    """The scan finds the calls (guards the scan itself against silently finding nothing)."""
    names = used_names()
    assert {
        "nvmlInit",
        "nvmlShutdown",
        "nvmlDeviceGetNvLinkRemoteDeviceType",
        "nvmlEventSetWait",
        "NVML_NVLINK_MAX_LINKS",
        "NVMLError",
    } <= names
    assert len(names) > 25


@pytest.mark.parametrize("name", sorted(used_names()))
def test_real_pynvml_and_the_fake_both_have_it(name: str) -> None:
    """Each name exists in pynvml and in the fake; functions take the same parameters."""
    real = getattr(pynvml, name)
    fake = getattr(FakeNvml.from_recording("h200-single"), name)
    if inspect.isfunction(real):
        assert _parameters(fake) == _parameters(real)
    elif isinstance(real, int):
        assert fake == real
    else:
        assert fake is real  # the exception class is pynvml's own


def test_the_fake_has_no_nvml_function_the_backend_does_not_use() -> None:
    """Nothing in the fake goes untested by the backend's own use of it."""
    fake_functions = {n for n in dir(FakeNvml) if n.startswith("nvml") and n[4].isupper()}
    assert fake_functions == {n for n in used_names() if n.startswith("nvml") and n[4].isupper()}


def test_the_fake_raises_pynvml_errors_with_the_right_codes() -> None:
    """Errors are pynvml.NVMLError subclasses carrying NVML's codes."""
    fake = FakeNvml.from_recording("lost-gpu")
    fake.nvmlInit()
    with pytest.raises(pynvml.NVMLError_GpuIsLost) as lost:
        fake.nvmlDeviceGetHandleByIndex(2)
    assert lost.value.value == pynvml.NVML_ERROR_GPU_IS_LOST
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetHandleByIndex(9)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetNvLinkState(fake.nvmlDeviceGetHandleByIndex(0), 0)


def test_the_fake_needs_nvml_started_like_the_real_one() -> None:
    """Calls before nvmlInit fail with UNINITIALIZED, as NVML's do."""
    fake = FakeNvml.from_recording("h200-single")
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_the_fake_answers_in_pynvml_shapes() -> None:
    """Structs have pynvml's field names; affinity is a word array of the asked size."""
    fake = FakeNvml.from_recording("dgx-a100-mig")
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(handle, FakeHandle)
    assert fake.nvmlDeviceGetPciInfo(handle).busId == "00000000:07:00.0"
    memory = fake.nvmlDeviceGetMemoryInfo(handle)
    assert memory.total == memory.used + memory.free
    sixteen_cpus_from_48 = 0xFFFF << 48  # CPUs 48-63 of word 0, 176-191 of word 2
    assert fake.nvmlDeviceGetCpuAffinity(handle, 4) == [sixteen_cpus_from_48, 0] * 2
    (process,) = fake.nvmlDeviceGetComputeRunningProcesses(handle)
    assert (process.pid, process.usedGpuMemory) == (4242, 10240 * 2**20)


def test_testing_module_exports_every_public_name() -> None:
    """gpuallocd.testing lists in __all__ every class and function it offers third parties."""
    import gpuallocd.testing as testing

    public = {
        name
        for name, value in vars(testing).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__.startswith("gpuallocd.")
    }
    assert public <= set(testing.__all__)
    assert all(hasattr(testing, name) for name in testing.__all__)


class _Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _started(recording: str | dict[str, object], clock: _Clock) -> FakeNvml:
    fake = (
        FakeNvml.from_recording(recording, clock=clock)
        if isinstance(recording, str)
        else FakeNvml(recording, clock=clock)
    )
    fake.nvmlInit()
    return fake


def test_the_energy_counter_advances_with_the_recorded_load() -> None:
    """Millijoules grow by the draw (mW) times the seconds passed; more load, more draw."""
    clock = _Clock()
    fake = _started("h200-single", clock)
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    start = fake.nvmlDeviceGetTotalEnergyConsumption(handle)
    idle_mw = fake.nvmlDeviceGetPowerUsage(handle)
    assert idle_mw == 76_000
    clock.now += 10
    assert fake.nvmlDeviceGetTotalEnergyConsumption(handle) == start + 10 * idle_mw
    fake.set_utilization(fake.uuids()[0], 100)
    assert fake.nvmlDeviceGetPowerUsage(handle) == 700_000  # full load draws the limit
    clock.now += 2
    assert fake.nvmlDeviceGetTotalEnergyConsumption(handle) == start + 10 * idle_mw + 1_400_000


def test_a_lower_power_limit_lowers_the_draw_and_is_kept_within_constraints() -> None:
    """The limit caps the draw; outside [min, max] NVML answers INVALID_ARGUMENT."""
    fake = _started("h200-single", _Clock())
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.set_utilization(fake.uuids()[0], 100)
    assert fake.nvmlDeviceGetPowerManagementLimitConstraints(handle) == [200_000, 700_000]
    assert fake.nvmlDeviceGetPowerManagementDefaultLimit(handle) == 700_000
    fake.nvmlDeviceSetPowerManagementLimit(handle, 250_000)
    assert fake.nvmlDeviceGetPowerManagementLimit(handle) == 250_000
    assert fake.nvmlDeviceGetPowerUsage(handle) == 250_000
    for outside in (199_999, 700_001):
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            fake.nvmlDeviceSetPowerManagementLimit(handle, outside)
    assert fake.nvmlDeviceGetPowerManagementLimit(handle) == 250_000


def test_only_root_may_set_a_power_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller that is not root gets NO_PERMISSION, as from the driver, and nothing changes."""
    fake = _started("h200-single", _Clock())
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    monkeypatch.setattr("gpuallocd.testing.power.os.geteuid", lambda: 1000)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        fake.nvmlDeviceSetPowerManagementLimit(handle, 300_000)
    assert fake.nvmlDeviceGetPowerManagementLimit(handle) == 700_000


def test_a_driver_reload_restarts_the_counter_and_the_default_limit() -> None:
    """After a reload the counter starts again near 0 and a set limit is gone."""
    clock = _Clock()
    fake = _started("dgx1-volta", clock)
    handle = fake.nvmlDeviceGetHandleByIndex(1)
    fake.nvmlDeviceSetPowerManagementLimit(handle, 200_000)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(handle) > 10**9
    fake.reload_driver()
    clock.now += 1
    assert fake.nvmlDeviceGetTotalEnergyConsumption(handle) == 43_000  # one idle second
    assert fake.nvmlDeviceGetPowerManagementLimit(handle) == 300_000


def test_a_gpu_older_than_volta_has_no_energy_counter() -> None:
    """Without a recorded counter NVML answers NOT_SUPPORTED; draw and limits still answer."""
    recording = load_recording("dgx1-volta")
    for device in recording["devices"]:
        del device["energy_counter_mj"]
    fake = _started(recording, _Clock())
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetTotalEnergyConsumption(handle)
    assert fake.nvmlDeviceGetPowerUsage(handle) == 43_000


def test_a_mig_instance_has_no_power_of_its_own() -> None:
    """Power and energy are the GPU's: a MIG device handle answers NOT_SUPPORTED."""
    fake = _started("dgx-a100-mig", _Clock())
    parent = next(
        fake.nvmlDeviceGetHandleByIndex(i)
        for i in range(fake.nvmlDeviceGetCount())
        if fake.nvmlDeviceGetMigMode(fake.nvmlDeviceGetHandleByIndex(i))[0]
    )
    mig = fake.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    for query in (fake.nvmlDeviceGetTotalEnergyConsumption, fake.nvmlDeviceGetPowerUsage):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            query(mig)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceSetPowerManagementLimit(mig, 200_000)
    assert fake.nvmlDeviceGetTotalEnergyConsumption(parent) > 0


def test_a_lost_gpu_has_no_power_reading() -> None:
    """Power of a GPU that fell off the bus fails with GPU_IS_LOST, like every query."""
    fake = _started("h200-single", _Clock())
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    fake.lose_gpu(fake.uuids()[0])
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetTotalEnergyConsumption(handle)
