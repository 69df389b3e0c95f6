"""Preemption where people look: Prometheus, the dashboard, MCP's `allocate`, the queue's
tiers; and a `gpu_lease` job's `on_preempt` told at the warning."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.allocator.queue.tiers import ahead_of_new, tiered
from gpuallocd.dashboard.sections import gpus_html
from gpuallocd.dashboard.source import NodeNow
from gpuallocd.mcp.allocation import allocate_options
from gpuallocd.mcp.arguments import check_arguments
from gpuallocd.mcp.catalog import tool_named
from tests.harness import wait_for
from tests.preempt_node import HOUR, Node
from tests.system_users import SystemUsers


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def node(short_dir: Path, system_users: SystemUsers) -> Iterator[Node]:
    node = Node(short_dir, system_users, metrics_listen=f"127.0.0.1:{_free_port()}")
    yield node
    node.close()


def _samples(node: Node) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    address = node.daemon.config.metrics_listen
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_prometheus_counts_preemptions_by_trigger_and_outcome(node: Node) -> None:
    """A preemptible lease shows in the gauge of its owner; root's preemption, acknowledged,
    in the counters; none left open."""
    done = node.ctl("alice", "--json", "allocate", "-n", "2", "--preemptible", "--ttl", "1d")
    lease_id = json.loads(done.stdout)["id"]
    alice = node.users.name("alice")
    assert _samples(node)[("gpuallocd_preemptible_gpus", (("user", alice),))] == 2
    node.step(HOUR)
    with node.client() as client:
        client.preempt(lease_id, "maintenance")
    assert _samples(node)[("gpuallocd_preemptions_open", ())] == 1
    node.ctl("alice", "checkpoint-done", "/scratch/x.pt", "--lease", lease_id)
    samples = _samples(node)
    key = ("gpuallocd_preemptions_total", (("outcome", "acknowledged"), ("trigger", "admin")))
    assert samples[key] == 1
    assert samples[("gpuallocd_preempted_total", ())] == 1
    assert samples[("gpuallocd_preemptions_open", ())] == 0


def test_the_dashboard_and_status_say_preemptible_and_preempted(node: Node) -> None:
    """`status` and the dashboard's holder cell: `preemptible`, then `preempted for root
    (admin)` with the deadline."""
    done = node.ctl("alice", "--json", "allocate", "--gpu", "0", "--preemptible", "--ttl", "1d")
    lease_id = json.loads(done.stdout)["id"]
    assert "; preemptible" in node.ctl("bob", "status").stdout
    node.step(HOUR)
    with node.client() as client:
        client.preempt(lease_id)
        gpus = client.request("GET", "/v1/gpus")["gpus"]
    status = ["-m", "gpuallocd.cli", "--socket", str(node.paths.socket), "status"]
    shown = node.users.run("bob", status, env={"COLUMNS": "160"}).stdout  # the holder whole
    assert "preempted for root: ends" in shown, shown
    page = gpus_html(
        NodeNow(now=0.0, name="n", gpus=gpus, labels={}, queue=[], reservations=[]),
        lambda uid: str(uid),
    )
    assert "(preempted for root, ends " in page
    assert "(preemptible)" not in page


def test_a_gpu_lease_job_is_told_through_on_preempt(node: Node) -> None:
    """`on_preempt(lease, preemption)` is called once at the warning, with the deadline."""
    script = (
        "import sys, time\n"
        "from gpulease import gpu_lease\n"
        "told = []\n"
        "with gpu_lease(4, preemptible=True, socket=sys.argv[1], ttl=86400,\n"
        "               on_preempt=lambda lease, p: told.append(p)) as lease:\n"
        "    print(lease.id, flush=True)\n"
        "    while not told:\n"
        "        time.sleep(0.02)\n"
        "    assert lease.preempt_requested and lease.preempt_deadline == told[0]['deadline_at']\n"
        "    lease.checkpoint_done('/scratch/told.pt')\n"
        "    print(told[0]['for'], flush=True)\n"
    )
    job = node.start_python("alice", "told", "-c", script, node.socket)
    wait_for(lambda: node.log("told").strip() != "", 30, what="alice's lease")
    lease_id = node.log("told").split()[0]
    node.step(HOUR)
    with node.client() as client:
        client.preempt(lease_id)
    assert job.wait(60) == 0, node.log("told")
    assert node.log("told").split()[1] == "root"
    assert node.lease(lease_id)["preemption"]["state"] == "acknowledged"


def test_mcp_allocate_takes_preemptible() -> None:
    """The tool's schema takes `preemptible` and passes it to the client."""
    arguments = check_arguments(
        tool_named("allocate").input_schema, {"count": 1, "preemptible": True}
    )
    assert allocate_options(arguments)["preemptible"] is True
    assert allocate_options({"count": 1})["preemptible"] is False


def _waiter(name: str, since: float, *, preemptible: bool, kept: float | None = None) -> object:
    spec = AllocateSpec(count=1, preemptible=preemptible, queued_since=kept)
    return SimpleNamespace(id=name, spec=spec, since=since)


def test_preemptible_waiters_go_behind_and_a_requeue_keeps_its_place() -> None:
    """Those that may not be preempted first as arranged; the preemptible ones by their place
    (a requeue's kept one); a new firm request lets only firm ones go first."""
    waiters = [
        _waiter("p-late", 10.0, preemptible=True),
        _waiter("firm", 20.0, preemptible=False),
        _waiter("requeue", 30.0, preemptible=True, kept=1.0),
    ]
    order = [w.id for w, _ in tiered([(w, None) for w in waiters], fair=False)]  # type: ignore[attr-defined]
    assert order == ["firm", "requeue", "p-late"]
    firm_new = AllocateSpec(count=1)
    assert [w.id for w in ahead_of_new(firm_new, waiters, 40.0)] == ["firm"]  # type: ignore[attr-defined]
    spare_new = AllocateSpec(count=1, preemptible=True)
    assert len(ahead_of_new(spare_new, waiters, 40.0)) == 3  # type: ignore[arg-type]
