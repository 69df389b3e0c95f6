"""Slices and shares without a daemon: the pure placements, plan and simulate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuallocd.cli import cli
from gpuallocd.daemon.config.loading import load_config
from gpuallocd.errors import ConfigError, GpuallocError
from gpuallocd.model import Topology
from gpuallocd.planning import make_unit_plan, read_trace, simulate
from gpuallocd.planning.slice_plans import UnitBook
from gpuallocd.policies import NodeSnapshot, get_policy
from gpuallocd.policies.rules import request_for
from gpuallocd.testing import nvml_inventory
from gpuallocd.topology import load_topology, topology_to_json

GIB = 2**30


@pytest.fixture(scope="module")
def mig_topology() -> Topology:
    inventory, _ = nvml_inventory("dgx-a100-mig")
    try:
        return inventory.topology()
    finally:
        inventory.close()


def test_slices_of_one_gpu_come_first(mig_topology: Topology) -> None:
    """Two 1g.10gb instances: both from GPU 7, leaving the larger ones alone."""
    plan = make_unit_plan(mig_topology, 2, mig_profile="1g.10gb")
    assert plan.gpus == (7, 7) and plan.kind == "mig" and plan.fragmentation == 1.0
    assert all(u.startswith("MIG-") for u in plan.uuids)


def test_shares_are_packed_best_fit_to_keep_whole_gpus_whole() -> None:
    """A share joins the GPU with the least room that fits, not a fresh one."""
    topology = load_topology("example:dgx-a100")
    book = UnitBook(topology)
    base = NodeSnapshot.from_busy(topology)
    placed = []
    for size in (50, 20, 30, 25):  # 50 -> A; 20 -> A (9 left); 30 -> B; 25 -> B (24 left)
        request = request_for(topology, 1, memory_bytes=size * GIB)
        choice = book.place(book.snapshot(base), request)
        book.take(f"s{size}", request, choice.gpus)
        placed.append(choice.gpus[0])
    assert placed[0] == placed[1] and placed[2] == placed[3] and placed[0] != placed[2]
    assert len(book.busy_gpus()) == 2


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=80), min_size=1, max_size=40))
def test_shares_never_exceed_a_gpus_capacity(sizes: list[int]) -> None:
    """Whatever sizes come, each GPU's shares sum to at most its capacity."""
    topology = load_topology("example:workstation-4gpu-nvbridge")
    book = UnitBook(topology, capacity={g.uuid: 40 * GIB for g in topology.gpus})
    base = NodeSnapshot.from_busy(topology)
    for i, size in enumerate(sizes):
        request = request_for(topology, 1, memory_bytes=size * GIB)
        try:
            choice = book.place(book.snapshot(base), request)
        except GpuallocError:  # refused: too large, or no room left
            continue
        book.take(f"s{i}", request, choice.gpus)
    assert all(used <= 40 * GIB for used in book.used().values())


def test_plan_cli_places_mig_instances_from_a_topology_file(
    mig_topology: Topology, tmp_path: Path
) -> None:
    """`plan --mig 1g.10gb -n 2` over a topology file with MIG devices names both instances."""
    path = tmp_path / "mig.json"
    path.write_text(json.dumps(topology_to_json(mig_topology)))
    result = CliRunner().invoke(
        cli, ["plan", "--topology", str(path), "-n", "2", "--mig", "1g.10gb", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["kind"] == "mig" and data["gpus"] == [7, 7]


def test_simulate_replays_shares_and_reports_their_fragmentation() -> None:
    """Shares pack on one GPU; a whole-GPU request avoids it; fragmentation is reported."""
    lines = [
        json.dumps({"op": "allocate", "id": "a", "memory_bytes": 20 * GIB}),
        json.dumps({"op": "allocate", "id": "b", "memory_bytes": 20 * GIB}),
        json.dumps({"op": "allocate", "id": "w", "count": 7}),
        json.dumps({"op": "allocate", "id": "x", "count": 1}),
        json.dumps({"op": "free", "id": "a"}),
        json.dumps({"op": "free", "id": "b"}),
        json.dumps({"op": "allocate", "id": "y", "count": 1}),
    ]
    result = simulate(
        load_topology("example:dgx-a100"), get_policy("best-effort"), read_trace(lines)
    )
    steps = result.steps
    assert steps[0].gpus == steps[1].gpus and steps[0].gpus is not None
    assert steps[0].gpus[0] not in (steps[2].gpus or ())
    assert steps[3].error is not None and steps[6].gpus == steps[0].gpus
    assert result.summary.grants == 4 and 0 < result.summary.share_fragmentation < 1


def test_shared_gpus_is_a_list_in_every_source(tmp_path: Path) -> None:
    """A TOML array, a comma-separated variable or option; anything else is a ConfigError."""
    file = tmp_path / "c.toml"
    file.write_text('shared_gpus = ["0", "GPU-x"]\n')
    assert load_config(file, environ={}).shared_gpus == ("0", "GPU-x")
    assert load_config(environ={"GPUALLOCD_SHARED_GPUS": "all"}).shared_gpus == ("all",)
    assert load_config(environ={}, shared_gpus=("1", "2")).shared_gpus == ("1", "2")
    file.write_text("shared_gpus = [1, 2]\n")
    with pytest.raises(ConfigError, match="shared_gpus must be a list of strings"):
        load_config(file, environ={})
