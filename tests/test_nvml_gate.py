"""The NVML gate: lazy start, one shutdown, errors translated into operator-grade messages."""

from __future__ import annotations

import sys

import pynvml
import pytest

from gpuallocd.errors import BackendError, NvmlError
from gpuallocd.inventory import open_inventory
from gpuallocd.inventory.base import NO_GPU_HINT
from gpuallocd.inventory.nvml.backend import NvmlInventory
from gpuallocd.inventory.nvml.gate import NvmlCode, NvmlGate, nvml_code
from gpuallocd.testing import FakeNvml


def _no_driver_library(*args: object, **kwargs: object) -> None:
    raise OSError("libnvidia-ml.so.1: cannot open shared object file")


@pytest.mark.parametrize(
    ("error", "advice"),
    [
        ("DRIVER_NOT_LOADED", "kernel driver is not loaded"),
        ("LIB_RM_VERSION_MISMATCH", "driver/library version mismatch"),
        ("NO_PERMISSION", "insufficient permissions to open /dev/nvidiactl"),
        ("LIBRARY_NOT_FOUND", "libnvidia-ml.so.1 was not found"),
        ("UNKNOWN", "NVML could not start: Unknown Error"),
    ],
)
def test_start_failures_say_what_to_do(error: str, advice: str) -> None:
    """Each common NVML start failure is one line with advice and how to run without a GPU."""
    fake = FakeNvml.from_recording("h200-single")
    fake.fail_init(error)
    with pytest.raises(NvmlError) as caught:
        NvmlInventory(nvml=fake)
    message = caught.value.message
    assert advice in message and NO_GPU_HINT in message
    assert "\n" not in message
    assert nvml_code(caught.value) == getattr(pynvml, f"NVML_ERROR_{error}")


def test_real_binding_without_driver_library_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real pynvml, with no libnvidia-ml.so.1 to load, gives the operator message."""
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", _no_driver_library)
    with pytest.raises(NvmlError, match=r"libnvidia-ml\.so\.1 was not found") as caught:
        open_inventory("nvml")
    assert NO_GPU_HINT in caught.value.message
    assert isinstance(caught.value, BackendError) and caught.value.code == "nvml_error"


def test_missing_binding_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without nvidia-ml-py installed, the message says how to install it."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlError, match="pip install nvidia-ml-py"):
        NvmlGate().start()


def test_nvml_starts_on_first_call_and_shuts_down_once() -> None:
    """No NVML call before it is needed; one nvmlInit, one nvmlShutdown however often closed."""
    fake = FakeNvml.from_recording("h200-single")
    gate = NvmlGate(fake)
    assert fake.calls["nvmlInit"] == 0
    assert gate.call("nvmlDeviceGetCount") == 1
    gate.call("nvmlDeviceGetCount")
    assert fake.calls["nvmlInit"] == 1 and fake.initialised == 1
    gate.shutdown()
    gate.shutdown()
    assert fake.calls["nvmlShutdown"] == 1 and fake.initialised == 0


def test_calls_after_shutdown_are_refused() -> None:
    """A closed gate does not quietly start NVML again."""
    gate = NvmlGate(FakeNvml.from_recording("h200-single"))
    gate.start()
    gate.shutdown()
    with pytest.raises(NvmlError, match="closed"):
        gate.call("nvmlDeviceGetCount")


def test_call_errors_carry_the_nvml_code_and_call() -> None:
    """Callers tell "not supported" from "lost" by code, without importing pynvml."""
    gate = NvmlGate(FakeNvml.from_recording("pcie-dual-socket"))
    handle = gate.call("nvmlDeviceGetHandleByIndex", 0)
    with pytest.raises(NvmlError) as caught:
        gate.call("nvmlDeviceGetMigMode", handle)
    assert nvml_code(caught.value) == NvmlCode.NOT_SUPPORTED
    assert caught.value.details["nvml_call"] == "nvmlDeviceGetMigMode"
    gate.shutdown()


def test_lost_gpu_message_says_what_to_do() -> None:
    """GPU_IS_LOST reads as the GPU falling off the bus, with the fix."""
    gate = NvmlGate(FakeNvml.from_recording("lost-gpu"))
    with pytest.raises(NvmlError) as caught:
        gate.call("nvmlDeviceGetHandleByIndex", 2)
    assert nvml_code(caught.value) == NvmlCode.GPU_IS_LOST
    assert "fallen off the bus" in caught.value.message and "reboot" in caught.value.message
    gate.shutdown()


def test_function_missing_from_an_old_binding_is_explained() -> None:
    """A binding too old for a query says to upgrade nvidia-ml-py."""
    gate = NvmlGate(FakeNvml.from_recording("h200-single"))
    with pytest.raises(NvmlError, match="upgrade"):
        gate.call("nvmlDeviceGetSomethingFromTheFuture")
    gate.shutdown()


def test_nvml_codes_match_the_binding() -> None:
    """The codes the gate acts on have the values pynvml gives them."""
    for code in NvmlCode:
        assert getattr(pynvml, f"NVML_ERROR_{code.name}") == code.value
