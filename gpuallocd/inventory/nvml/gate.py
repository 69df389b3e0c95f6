"""The one door to NVML: lazy start under a lock, shutdown at exit, errors translated.

Nothing else in gpuallocd imports `pynvml` or calls it directly. Every call goes through
`NvmlGate.call`, which starts NVML on first use and turns NVML's exceptions into
`gpuallocd.errors.NvmlError`, carrying the NVML return code in `details["nvml_code"]` so
callers can tell "not supported" from "GPU is lost" without importing pynvml.

A test (tests/test_fake_nvml_honest.py) reads this module and `nvml_api.py` for the NVML
names they use, and checks that the fake in `gpuallocd.testing` provides each one and that
real pynvml has each with a compatible signature.
"""

from __future__ import annotations

import enum
import importlib
import logging
from typing import Any

from gpuallocd.errors import NvmlError
from gpuallocd.inventory.base import NO_GPU_HINT
from gpuallocd.inventory.gate import LibraryGate

__all__ = ["NvmlCode", "NvmlGate", "nvml_code"]

log = logging.getLogger(__name__)


class NvmlCode(enum.IntEnum):
    """NVML return codes that gpuallocd acts on (values from nvml.h; stable across releases)."""

    UNINITIALIZED = 1
    INVALID_ARGUMENT = 2
    NOT_SUPPORTED = 3
    NO_PERMISSION = 4
    NOT_FOUND = 6
    DRIVER_NOT_LOADED = 9
    TIMEOUT = 10
    LIBRARY_NOT_FOUND = 12
    FUNCTION_NOT_FOUND = 13
    GPU_IS_LOST = 15
    RESET_REQUIRED = 16
    LIB_RM_VERSION_MISMATCH = 18
    UNKNOWN = 999


_START_FAILURES = {
    NvmlCode.LIBRARY_NOT_FOUND: (
        "NVML could not be loaded: libnvidia-ml.so.1 was not found; install the NVIDIA "
        "driver, or add the directory holding libnvidia-ml.so.1 to the loader path"
    ),
    NvmlCode.DRIVER_NOT_LOADED: (
        "NVML could not start: the NVIDIA kernel driver is not loaded; check "
        "`lsmod | grep nvidia` and `dmesg` for why it did not load"
    ),
    NvmlCode.LIB_RM_VERSION_MISMATCH: (
        "NVML could not start: driver/library version mismatch (the loaded nvidia kernel "
        "module and libnvidia-ml.so differ, usually after a driver upgrade); reboot, or "
        "unload and reload the nvidia kernel modules"
    ),
    NvmlCode.NO_PERMISSION: (
        "NVML could not start: insufficient permissions to open /dev/nvidiactl and "
        "/dev/nvidia*; run gpuallocd as root or as a user allowed to open those devices"
    ),
}

_CALL_FAILURES = {
    NvmlCode.GPU_IS_LOST: (
        "the GPU has fallen off the bus (NVML: GPU is lost); look for Xid 79 in `dmesg`; "
        "the GPU needs a reset (`nvidia-smi -r`) or the node a reboot"
    ),
    NvmlCode.RESET_REQUIRED: "the GPU needs a reset (`nvidia-smi -r`) before it can be used",
    NvmlCode.NO_PERMISSION: "insufficient permissions for this NVML query; run gpuallocd as root",
}


def nvml_code(error: NvmlError) -> int | None:
    """The NVML return code behind an NvmlError raised by the gate, if any."""
    code = error.details.get("nvml_code")
    return code if isinstance(code, int) else None


def _known_code(exc: BaseException) -> tuple[int | None, NvmlCode | None]:
    """The raw NVML return code of a pynvml exception, and its name where gpuallocd knows it."""
    code = getattr(exc, "value", None)
    if not isinstance(code, int):
        return None, None
    try:
        return code, NvmlCode(code)
    except ValueError:
        return code, None


def _describe(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # pynvml's __str__ itself calls into NVML for unknown codes
        return repr(exc)


class NvmlGate(LibraryGate):
    """Starts NVML on first use, routes every call, and shuts NVML down once.

    `nvml` is the pynvml module, or an object with the same functions (the fake in
    `gpuallocd.testing`); None imports pynvml on first use.
    """

    def __init__(self, nvml: Any | None = None) -> None:
        super().__init__(nvml)

    def _closed_error(self) -> NvmlError:
        return NvmlError("the NVML backend is closed")

    def _load(self) -> None:
        if self._lib is not None:
            return
        try:
            self._lib = importlib.import_module("pynvml")
        except ImportError as exc:
            raise NvmlError(
                f"the NVML Python binding (nvidia-ml-py) is not installed ({exc}); "
                f"install it with `pip install nvidia-ml-py`, or {NO_GPU_HINT}"
            ) from exc

    def _init(self) -> None:
        try:
            self._lib.nvmlInit()
        except self._error_classes() as exc:
            code, known = _known_code(exc)
            reason = _START_FAILURES.get(known) if known is not None else None
            message = reason or f"NVML could not start: {_describe(exc)}"
            raise NvmlError(f"{message}; {NO_GPU_HINT}", nvml_code=code) from exc

    def _error_classes(self) -> tuple[type[BaseException], ...]:
        classes = [self._lib.NVMLError]
        mismatch = getattr(self._lib, "NVMLLibraryMismatchError", None)
        if isinstance(mismatch, type):
            classes.append(mismatch)
        return tuple(classes)

    def call(self, name: str, *args: object, waits_seconds: float = 0.0) -> Any:
        """Call the NVML function `name`; NVML errors come back as NvmlError.

        `waits_seconds` is how long the call may block by its own asking (an event wait's
        timeout); only past that and the daemon's deadline is it reported as hung.
        """
        self.start()
        function = getattr(self._lib, name, None)
        if function is None:
            raise NvmlError(
                f"NVML {name} is missing from the installed nvidia-ml-py; upgrade it",
                nvml_code=int(NvmlCode.FUNCTION_NOT_FOUND),
                nvml_call=name,
            )
        running = self.calls.enter(name, waits_seconds)
        try:
            return function(*args)
        except self._error_classes() as exc:
            raise self._call_error(name, exc) from exc
        finally:
            self.calls.leave(running)

    def constant(self, name: str) -> int:
        """An integer constant of the NVML binding, such as NVML_NVLINK_MAX_LINKS."""
        self.start()
        return int(getattr(self._lib, name))

    def _call_error(self, name: str, exc: BaseException) -> NvmlError:
        code, known = _known_code(exc)
        reason = _CALL_FAILURES.get(known) if known is not None else None
        message = f"NVML {name} failed: {reason or _describe(exc)}"
        return NvmlError(message, nvml_code=code, nvml_call=name)

    def _stop(self) -> None:
        try:
            self._lib.nvmlShutdown()
        except self._error_classes() as exc:
            log.warning("NVML shutdown failed: %s", _describe(exc))
