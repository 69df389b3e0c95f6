"""Capturing a node into a recording, and loading recordings by name or path."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest

from gpuallocd.errors import InventoryError
from gpuallocd.inventory import open_inventory
from gpuallocd.testing import FakeNvml, load_recording, recording_names
from gpuallocd.testing.capture import capture, main
from gpuallocd.topology import topology_to_json

REPLAYED = ("format", "driver_version", "nvml_version", "common_ancestor")


def test_bundled_recordings_are_the_five_machines() -> None:
    """The NVML recordings this package ships, by name."""
    assert recording_names() == [
        "dgx-a100-mig",
        "dgx1-volta",
        "h200-single",
        "lost-gpu",
        "pcie-dual-socket",
    ]
    assert all(load_recording(n)["provenance"] == "specification" for n in recording_names())


@pytest.mark.parametrize("name", ["dgx-a100-mig", "dgx1-volta", "h200-single", "pcie-dual-socket"])
def test_capturing_a_replayed_machine_gives_back_its_recording(name: str) -> None:
    """Capture asks what the backend asks: replaying a capture answers the same way."""
    recording = load_recording(name)
    captured = capture(FakeNvml(recording, clock=lambda: 0.0), name=name)  # counters still
    assert captured["devices"] == recording["devices"]
    assert {k: captured[k] for k in REPLAYED} == {k: recording[k] for k in REPLAYED}
    assert captured["provenance"] == "captured"


def test_capture_records_a_lost_gpu_as_lost() -> None:
    """A GPU that fell off the bus is recorded as lost, and its PCIe paths as errors."""
    captured = capture(FakeNvml.from_recording("lost-gpu"))
    assert captured["devices"][2] == {"index": 2, "lost": True}
    assert captured["common_ancestor"][0][2] == {"error": "GPU_IS_LOST"}
    assert captured["devices"][3]["uuid"].startswith("GPU-")


def test_capture_can_leave_processes_out() -> None:
    """--no-processes keeps pids and memory of running jobs out of a shared recording."""
    captured = capture(FakeNvml.from_recording("dgx-a100-mig"), with_processes=False)
    assert all(device["processes"] == [] for device in captured["devices"])


def test_capture_command_writes_a_replayable_recording(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`python -m gpuallocd.testing.capture > node.json` replays as the same node."""
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml.from_recording("dgx1-volta"))
    assert main(["--name", "lab-node"]) == 0
    path = tmp_path / "node.json"
    path.write_text(capsys.readouterr().out)
    replayed = open_inventory(f"nvml-recording:{path}")
    original = open_inventory("nvml-recording:dgx1-volta")
    try:
        document: dict[str, Any] = topology_to_json(replayed.topology())
        assert document["name"] == "lab-node"
        assert document == {**topology_to_json(original.topology()), "name": "lab-node"}
    finally:
        replayed.close()
        original.close()


def test_capture_command_without_nvml_fails_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No driver: exit status 1 and the operator message, nothing on stdout."""

    def no_library(*args: object) -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(pynvml, "nvmlLib", None)
    monkeypatch.setattr(pynvml, "CDLL", no_library)
    assert main([]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("capture failed: NVML could not be loaded")


def test_unknown_recording_name_lists_the_known_ones() -> None:
    """A typo in a recording name says which names exist."""
    with pytest.raises(InventoryError, match="known: dgx-a100-mig, dgx1-volta"):
        load_recording("dgx-a1000")


def test_recording_of_the_wrong_format_is_refused(tmp_path: Path) -> None:
    """An AMD recording is not an NVML one; a topology file is neither."""
    with pytest.raises(InventoryError, match="expected format"):
        load_recording("amd-mi300x-8gpu")
    path = tmp_path / "topology.json"
    path.write_text(json.dumps({"format": "gpuallocd-topology/1", "gpus": []}))
    with pytest.raises(InventoryError, match="expected format"):
        load_recording(path)


def test_unreadable_recording_file_is_explained(tmp_path: Path) -> None:
    """A missing file or broken JSON is an InventoryError naming the file."""
    with pytest.raises(InventoryError, match="cannot read recording"):
        load_recording(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(InventoryError, match="invalid JSON"):
        load_recording(broken)
