"""The fake amdsmi stays honest: it has exactly what the backend calls, as amdsmi has it.

amdsmi cannot be imported without ROCm's libamd_smi.so, so the reference is a transcription
of the amdsmi 7.0 Python interface (amdsmi_interface.py): each function's parameters.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import gpuallocd.inventory.amd.backend as amd
import gpuallocd.inventory.amd.gate as amd_gate
from gpuallocd.testing import FakeAmdSmi
from gpuallocd.testing.fake_amdsmi import AmdSmiLibraryException

AMDSMI_7_SIGNATURES = {
    "amdsmi_init": ["flag"],
    "amdsmi_shut_down": [],
    "amdsmi_get_processor_handles": [],
    "amdsmi_get_gpu_device_uuid": ["processor_handle"],
    "amdsmi_get_gpu_device_bdf": ["processor_handle"],
    "amdsmi_get_gpu_asic_info": ["processor_handle"],
    "amdsmi_get_gpu_memory_total": ["processor_handle", "mem_type"],
    "amdsmi_get_gpu_memory_usage": ["processor_handle", "mem_type"],
    "amdsmi_topo_get_numa_node_number": ["processor_handle"],
    "amdsmi_topo_get_link_type": ["processor_handle_src", "processor_handle_dst"],
    "amdsmi_get_gpu_compute_partition": ["processor_handle"],
    "amdsmi_get_gpu_activity": ["processor_handle"],
    "amdsmi_get_gpu_process_list": ["processor_handle"],
}
AMDSMI_7_TYPES = {"AmdSmiException", "AmdSmiInitFlags", "AmdSmiMemoryType"}

_USES = re.compile(r'"(amdsmi_(?!code)\w+)"|_lib\.(\w+)')


def used_names() -> set[str]:
    names: set[str] = set()
    for module in (amd_gate, amd):
        source = Path(inspect.getfile(module)).read_text()
        names.update(a or b for a, b in _USES.findall(source))
    return names


def test_the_backend_uses_only_known_amdsmi_names() -> None:
    """Every amdsmi name the backend reaches is in the transcribed amdsmi 7 interface."""
    assert used_names() == set(AMDSMI_7_SIGNATURES) | AMDSMI_7_TYPES


@pytest.mark.parametrize("name", sorted(AMDSMI_7_SIGNATURES))
def test_the_fake_takes_amdsmi_parameters(name: str) -> None:
    """The fake's functions take amdsmi's parameters, by name and in order."""
    function = getattr(FakeAmdSmi.from_recording("amd-pcie-mi210"), name)
    assert list(inspect.signature(function).parameters) == AMDSMI_7_SIGNATURES[name]


def test_the_fake_has_no_function_the_backend_does_not_use() -> None:
    """Nothing in the fake goes untested by the backend's own use of it."""
    assert {n for n in dir(FakeAmdSmi) if n.startswith("amdsmi_")} == set(AMDSMI_7_SIGNATURES)


def test_the_fake_enums_have_amdsmi_values() -> None:
    """INIT_AMD_GPUS and VRAM carry amdsmi.h's values."""
    assert FakeAmdSmi.AmdSmiInitFlags.INIT_AMD_GPUS == 2
    assert FakeAmdSmi.AmdSmiMemoryType.VRAM == 0


def test_the_fake_raises_library_exceptions_with_status_codes() -> None:
    """Errors are AmdSmiLibraryException with amdsmi's status code, as amdsmi raises them."""
    fake = FakeAmdSmi.from_recording("amd-pcie-mi210")
    with pytest.raises(AmdSmiLibraryException) as not_init:
        fake.amdsmi_get_processor_handles()
    assert not_init.value.get_error_code() == 32
    fake.amdsmi_init()
    handle = fake.amdsmi_get_processor_handles()[0]
    with pytest.raises(FakeAmdSmi.AmdSmiException) as unsupported:
        fake.amdsmi_get_gpu_compute_partition(handle)
    assert isinstance(unsupported.value, AmdSmiLibraryException)
    assert unsupported.value.get_error_code() == 2
