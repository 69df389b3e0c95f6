"""The one door to amdsmi: lazy start under a lock, shutdown, typed queries, errors translated.

amdsmi is an optional extra (`pip install gpuallocd[amd]`) and needs ROCm's libamd_smi.so
at import time. Its errors come back as InventoryError with the amdsmi status code in
`details["amdsmi_code"]`.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

from gpuallocd.errors import InventoryError
from gpuallocd.inventory.base import NO_GPU_HINT
from gpuallocd.inventory.gate import LibraryGate

__all__ = ["AMDSMI_NOT_SUPPORTED", "AmdGate", "amdsmi_code"]

# amdsmi_status_t values (amdsmi.h)
AMDSMI_NOT_SUPPORTED = 2
_FAIL_LOAD_MODULE = 4
_NO_PERM = 10
_DRIVER_NOT_LOADED = 34

# amdsmi_link_type_t values
LINK_INTERNAL = 0
LINK_PCIE = 1
LINK_XGMI = 2

_START_FAILURES = {
    _FAIL_LOAD_MODULE: "amdsmi could not load libamd_smi.so; install ROCm's amd-smi library",
    _NO_PERM: (
        "amdsmi could not open the GPUs (permission denied on /dev/kfd or /dev/dri/renderD*); "
        "run gpuallocd as root or as a member of the render and video groups"
    ),
    _DRIVER_NOT_LOADED: (
        "amdsmi could not start: the amdgpu kernel driver is not loaded; check "
        "`lsmod | grep amdgpu` and `dmesg`"
    ),
}


def amdsmi_code(error: InventoryError) -> int | None:
    code = error.details.get("amdsmi_code")
    return code if isinstance(code, int) else None


def _status(exc: BaseException) -> int | None:
    getter = getattr(exc, "get_error_code", None)
    code = getter() if callable(getter) else None
    return code if isinstance(code, int) else None


class AmdGate(LibraryGate):
    """Starts amdsmi on first use, routes every call, and shuts it down once."""

    def __init__(self, amdsmi: Any | None = None) -> None:
        super().__init__(amdsmi)

    def _closed_error(self) -> InventoryError:
        return InventoryError("the amdsmi backend is closed")

    def _load(self) -> None:
        if self._lib is not None:
            return
        try:
            self._lib = importlib.import_module("amdsmi")
        except Exception as exc:  # amdsmi raises more than ImportError without ROCm
            raise InventoryError(
                f"amdsmi is not usable ({type(exc).__name__}: {exc}); install ROCm's amd-smi "
                f"library and `pip install gpuallocd[amd]`, or {NO_GPU_HINT}"
            ) from exc

    def _init(self) -> None:
        try:
            self._lib.amdsmi_init(self._lib.AmdSmiInitFlags.INIT_AMD_GPUS)
        except self._lib.AmdSmiException as exc:
            code = _status(exc)
            reason = _START_FAILURES.get(code or -1, f"amdsmi could not start: {exc}")
            raise InventoryError(f"{reason}; {NO_GPU_HINT}", amdsmi_code=code) from exc

    def call(self, name: str, *args: object) -> Any:
        """Call the amdsmi function `name`; amdsmi errors come back as InventoryError."""
        self.start()
        running = self.calls.enter(name)
        try:
            return getattr(self._lib, name)(*args)
        except self._lib.AmdSmiException as exc:
            code = _status(exc)
            raise InventoryError(
                f"amdsmi {name} failed: {exc}", amdsmi_code=code, amdsmi_call=name
            ) from exc
        finally:
            self.calls.leave(running)

    def vram(self) -> object:
        """The VRAM memory type argument of the memory queries."""
        self.start()
        vram: object = self._lib.AmdSmiMemoryType.VRAM
        return vram

    def _stop(self) -> None:
        with contextlib.suppress(self._lib.AmdSmiException):  # shutting down anyway
            self._lib.amdsmi_shut_down()
