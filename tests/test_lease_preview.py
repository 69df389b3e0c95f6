"""The daemon's dry run (`POST /v1/leases/preview`): allocate's own checks and choice on the
live node, the same refusal codes, the queue's estimate, and nothing written."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from gpulease import Client, GpuallocError, InvalidRequest

from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle
from gpuallocd.allocator.leases.parts import SharedParts
from gpuallocd.allocator.leases.specs import AllocateSpec
from gpuallocd.allocator.site.limits import Limits, LimitsTable
from gpuallocd.allocator.site.rules import SiteRules
from gpuallocd.inventory import open_inventory
from gpuallocd.ledger import Ledger
from gpuallocd.model import Caller
from tests.harness import DaemonPaths, HandClock, ThreadDaemon, ctl_argv
from tests.ledger_history import INVENTORY as LEDGER_INVENTORY
from tests.ledger_history import held, open_ledger
from tests.rules_harness import daemon_with_config
from tests.system_users import SystemUsers, open_to_everyone
from tests.test_energy_leases import Machine, ctl_json
from tests.test_running_totals import DAY, START, sqlite_steps

DGX1 = "example:dgx1-volta"


# The housekeeping's mark of how far running totals were purged, written on its own
# schedule (ledger/totals.py): no request's doing.
HOUSEKEEPING = "('totals_purged_before',"


def ledger_digest(paths: DaemonPaths) -> str:
    """Every row of every table of the ledger, hashed (read on a connection of its own),
    but the housekeeping's purge mark."""
    uri = f"file:{paths.state_dir / 'ledger.sqlite3'}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as db, db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        digest = hashlib.sha256()
        for table in sorted(tables):
            for row in sorted(map(repr, db.execute(f'SELECT * FROM "{table}"'))):
                if not row.startswith(HOUSEKEEPING):
                    digest.update(f"{table} {row}".encode())
    return digest.hexdigest()


def refusal_of_allocate(client: Client, count: int | None = None, **options: Any) -> str:
    """The code the allocate itself is refused with."""
    with pytest.raises(GpuallocError) as refused:
        client.allocate(count, **options)
    return str(refused.value.code)


@pytest.mark.parametrize("default_policy", ["simple", "best-effort", "spread", "packed"])
def test_a_preview_picks_what_the_following_allocate_gets(
    start_daemon: Callable[..., ThreadDaemon], default_policy: str
) -> None:
    """Over the live node (GPUs 0 and 5 held), a request naming no policy is previewed with
    the daemon's `default_policy` and the GPUs the allocate that follows then gets."""
    daemon = start_daemon(inventory=DGX1, default_policy=default_policy)
    with daemon.client() as client:
        client.allocate_specific([0, 5], ttl=600)
        for count in (3, 2, 1):
            found = client.preview(count)
            lease = client.allocate(count)
            assert (found["outcome"], found["policy"]) == ("granted", default_policy)
            assert [g["uuid"] for g in found["gpus"]] == list(lease.uuids)
            assert found["refusal"] is None and found["would_wait"] is None


def test_a_preview_with_a_named_policy_or_a_share_agrees_with_allocate(
    paths: DaemonPaths,
) -> None:
    """On the recorded DGX-1: a named policy is the one used; a memory share is placed
    where the allocate puts it."""
    machine = Machine(paths, shared_gpus=["7"], share_memory_reserve_bytes=0)
    machine.daemon.start()
    try:
        with machine.daemon.client() as client:
            client.allocate_specific([1], ttl=600)
            found = client.preview(2, policy="spread")
            assert found["policy"] == "spread"
            lease = client.allocate(2, policy="spread")
            assert [g["uuid"] for g in found["gpus"]] == list(lease.uuids)
            share = client.preview(1, memory_bytes=2**30)
            granted = client.allocate(1, memory_bytes=2**30)
            assert share["outcome"] == "granted", share
            assert [(g["uuid"], g["kind"]) for g in share["gpus"]] == [
                (g["uuid"], g["kind"]) for g in granted.raw["gpus"]
            ]
    finally:
        machine.daemon.stop()


def test_a_preview_writes_nothing(start_daemon: Callable[..., ThreadDaemon]) -> None:
    """Granted, waiting, refused and retried previews leave the ledger (leases, history,
    notices, every table), the leases and the queue as they were."""
    daemon = start_daemon(default_policy="simple")
    with daemon.client() as client:
        held = client.allocate_specific([0, 1, 2], ttl=600, label="sweep", request_id="r-1")
        before = (ledger_digest(daemon.paths), client.leases(), client.queue(), client.history())
        answers = [
            client.preview(1),
            client.preview(2),
            client.preview(2, wait=True),
            client.preview(1, ttl=10**9),
            client.preview(gpus=[0]),
            client.preview(3, request_id="r-1"),
        ]
        after = (ledger_digest(daemon.paths), client.leases(), client.queue(), client.history())
    assert [a["outcome"] for a in answers] == [
        "granted",
        "refused",
        "waits",
        "refused",
        "refused",
        "granted",
    ]
    assert answers[5]["retry_of"] == held.id
    assert after == before


@pytest.mark.parametrize(
    ("config", "request_", "code"),
    [
        ("[limits]\nmax_gpus = 2\n", {"count": 1}, "quota_exceeded"),
        ("[limits]\nmax_ttl_seconds = 600\n", {"count": 1, "ttl": 3600}, "quota_exceeded"),
        (
            "[limits]\nmax_power_limit_watts = 100\n",
            {"count": 1, "power_limit_watts": 200},
            "quota_exceeded",
        ),
        (
            "[limits]\nmax_preemptible_gpus = 0\n",
            {"count": 1, "preemptible": True},
            "quota_exceeded",
        ),
        (
            "[limits]\nmax_waiting = 0\n",
            {"count": 3, "wait": True, "timeout": 5},
            "quota_exceeded",
        ),
        ("", {"count": 1, "ttl": 10**9}, "invalid_request"),
        ("", {"count": 5}, "count_exceeds_node"),
        ("", {"gpus": [0]}, "gpu_busy"),
        ("", {"count": 3}, "gpus_unavailable"),
    ],
)
def test_a_refused_preview_gives_the_code_and_words_of_the_allocate(
    paths: DaemonPaths, config: str, request_: dict[str, Any], code: str
) -> None:
    """Limits, TTL and power bounds, the node's size and busy GPUs: the preview's refusal is
    the allocate's, code and message."""
    daemon = daemon_with_config(paths, config, default_policy="simple").start()
    try:
        with daemon.client() as client:
            client.allocate_specific([0, 1], ttl=600)
            found = client.preview(**request_)
            assert found["outcome"] == "refused" and found["refusal"]["code"] == code
            with pytest.raises(GpuallocError) as refused:
                client.allocate(**request_)
            assert (refused.value.code, refused.value.message) == (
                code,
                found["refusal"]["message"],
            )
    finally:
        daemon.stop()


def test_a_drained_gpu_and_a_budget_refuse_the_preview_as_the_allocate(paths: DaemonPaths) -> None:
    """A drained GPU named, and a GPU-hour budget spent: the allocate's codes."""
    clock = HandClock()
    config = "[limits]\nmax_gpu_hours_per_day = 1\n"
    daemon = daemon_with_config(paths, config, clock=clock, default_policy="simple").start()
    try:
        with daemon.client() as client:
            client.drain([3], "fan")
            drained = client.preview(gpus=[3])["refusal"]
            assert drained["code"] == refusal_of_allocate(client, gpus=[3])
            lease = client.allocate(2, ttl=7200)
            clock.step(3600)
            client.free(lease.id)
            spent = client.preview(1)["refusal"]
            assert spent is not None and spent["code"] == "quota_exceeded"
            assert refusal_of_allocate(client, 1) == "quota_exceeded"
    finally:
        daemon.stop()


@pytest.fixture
def budgeted(system_users: SystemUsers, short_dir: Path, paths: DaemonPaths) -> Iterator[Machine]:
    """The recorded DGX-1, idle, under a power budget of 1,000 W (`power_fit = "wait"`); its
    power read at the start only (the timers' hour is never reached in a test)."""
    open_to_everyone(short_dir)
    machine = Machine(
        paths,
        energy_interval_seconds=3600,
        sample_interval_seconds=3600,
        power_budget_watts=1000,
        power_fit="wait",
    )
    for uuid in machine.fake.uuids():
        machine.fake.set_utilization(uuid, 0)
    machine.fake.nvmlInit()
    machine.daemon.start()
    yield machine
    machine.daemon.stop()


def power_calls(machine: Machine) -> dict[str, int]:
    """The NVML power calls made so far (reads of draw and limits, caps set)."""
    return {name: n for name, n in machine.fake.calls.items() if "Power" in name}


def test_the_power_budget_refuses_the_preview_as_the_allocate_and_no_driver_is_called(
    system_users: SystemUsers, budgeted: Machine
) -> None:
    """alice's two GPUs commit 600 W, the idle six 258 W: a third GPU is refused by the
    preview with the allocate's code and words; a capped preview shows each card's cap; no
    preview calls the driver."""
    ctl_json(system_users, "alice", budgeted, "allocate", "-n", "2")
    with budgeted.daemon.client() as client:
        calls = power_calls(budgeted)
        found = client.preview(1)
        capped = client.preview(1, power_limit_watts=100)
        assert power_calls(budgeted) == calls
        assert found["refusal"]["code"] == "gpus_unavailable"
        assert found["refusal"]["message"].startswith("power: 858 of 1,000 W committed")
        assert found["would_wait"]["reason"] == "Power"
        with pytest.raises(GpuallocError) as refused:
            client.allocate(1)
        assert refused.value.message == found["refusal"]["message"]
        assert capped["outcome"] == "granted" and capped["power_limit_watts"] == 100
        (cap,) = capped["power_caps"]
        assert cap["index"] == capped["gpus"][0]["index"]
        assert cap["limit_mw"] >= 100_000 and cap["clamped"] == (cap["limit_mw"] != 100_000)
        granted = client.allocate(1, power_limit_watts=100)  # the grant reads the cards
        assert list(granted.uuids) == [g["uuid"] for g in capped["gpus"]]
        assert power_calls(budgeted) != calls


def test_a_preview_that_does_not_fit_gets_the_queues_own_estimate(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """Behind one waiter, a request that does not fit is placed second with the estimate
    and reason `queue` then shows it when it really queues."""
    daemon = start_daemon(default_policy="simple")
    with daemon.client() as client, daemon.client() as other:
        client.allocate_specific([0, 1, 2], ttl=600, label="sweep")
        client.allocate_specific([3], ttl=1200)
        found = client.preview(2, wait=True)
        assert found["outcome"] == "waits" and found["refusal"] is None
        waiter = found["would_wait"]
        assert (waiter["position"], waiter["waiters_ahead"], waiter["reason"]) == (
            1,
            0,
            "Resources",
        )
        [held] = waiter["waiting_for"]
        assert ([g["index"] for g in held["gpus"]], held["label"]) == ([0, 1, 2], "sweep")
        refused = client.preview(2)
        assert refused["refusal"]["code"] == "gpus_unavailable"
        assert refused["would_wait"]["estimated_start_at"] == waiter["estimated_start_at"]
        with pytest.raises(GpuallocError):
            other.allocate(2, wait=True, timeout=0.5)
        assert client.queue() == []


def test_bad_input_is_refused_as_allocate_refuses_it_and_changes_nothing(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """Unknown fields, wrong types and out-of-range values: `invalid_request`, as allocate
    answers them, and the ledger as it was."""
    daemon = start_daemon(default_policy="simple")
    bodies: list[Any] = [
        {"count": 0},
        {"count": "2"},
        {"count": 1, "owner_uid": 0},
        {"count": 1, "power_limit_watts": 10**6},
        {"count": 1, "ttl_seconds": "forever"},
        {"count": 1, "preempt_signal": 9},
        [1],
    ]
    with daemon.client() as client:
        before = ledger_digest(daemon.paths)
        for body in bodies:
            with pytest.raises(InvalidRequest):
                client.request("POST", "/v1/leases/preview", body)
            with pytest.raises(InvalidRequest):
                client.request("POST", "/v1/leases", body)
        assert ledger_digest(daemon.paths) == before
        assert client.leases() == []


def test_bobs_preview_shows_no_more_than_status_and_allocate_show_him(
    system_users: SystemUsers, short_dir: Path, start_daemon: Callable[..., ThreadDaemon]
) -> None:
    """bob's preview names alice's lease as `status` shows it to him (holder, label, end; no
    pid, no lease id); her lease is not his to requeue; a wait behind his own lease is
    refused by the preview as by the allocate."""
    open_to_everyone(short_dir)
    daemon = start_daemon(default_policy="simple")
    socket = daemon.paths.socket
    alice = ctl_json_at(system_users, "alice", socket, "allocate", "--gpu", "0", "--label", "a")
    with daemon.client() as root:
        root.allocate_specific([2, 3], ttl=60)
    ctl_json_at(system_users, "bob", socket, "allocate", "--gpu", "1")
    endless = ("allocate", "--gpu", "1", "--wait", "--timeout", "5")
    dry = system_users.ctl("bob", socket, *endless, "--dry-run")
    real = system_users.ctl("bob", socket, *endless)
    assert "[would_wait_forever]" in dry.stdout and "[would_wait_forever]" in real.stderr
    assert dry.returncode == real.returncode == 2
    found = ctl_json_at(
        system_users, "bob", socket, "allocate", "--gpu", "0", "--dry-run", "--wait"
    )
    status = ctl_json_at(system_users, "bob", socket, "status")
    shown = next(gpu for gpu in status["gpus"] if gpu["index"] == 0)
    [held] = found["would_wait"]["waiting_for"]
    assert held["label"] == shown["label"] == "a"
    assert held["holder"]["user"] == shown["holder"]["user"] == system_users.name("alice")
    assert alice["id"] not in json.dumps(found) and str(alice["pid"]) not in json.dumps(held)
    body = {"count": 1, "requeue_of": alice["id"]}
    done = system_users.run(
        "bob",
        ["-c", _REQUEST.format(socket=str(socket), body=json.dumps(body))],
    )
    answer = json.loads(done.stdout)
    assert answer["refusal"]["code"] == "permission_denied", done.stderr


_REQUEST = (
    "import json; from gpulease import Client; "
    "print(json.dumps(Client({socket!r}).request('POST', '/v1/leases/preview', {body})))"
)


def ctl_json_at(users: SystemUsers, who: str, socket: Path, *args: str) -> Any:
    done = users.ctl(who, socket, "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_allocate_dry_run_says_what_would_happen_and_exits_as_allocate_would(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """`allocate --dry-run` says the GPUs it would get, or the refusal and the wait, leases
    nothing, and exits with the code the allocate itself exits with."""
    import subprocess

    daemon = start_daemon(default_policy="simple")
    socket = daemon.paths.socket

    def ctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(ctl_argv(socket, *args), capture_output=True, text=True, timeout=60)

    fits = ctl("allocate", "-n", "1", "--dry-run")
    assert fits.returncode == 0 and fits.stdout.startswith("would lease GPU 0 [GPU-"), fits
    assert "(policy simple)" in fits.stdout and "nothing was leased" in fits.stdout
    assert ctl("allocate", "-n", "3", "--ttl", "10m").returncode == 0
    refused = ctl("allocate", "-n", "2", "--dry-run")
    assert "would be refused: 2 GPU(s) asked for, 1 available [gpus_unavailable]" in refused.stdout
    assert "with --wait: would queue at position 1: Resources" in refused.stdout
    assert refused.returncode == ctl("allocate", "-n", "2").returncode == 4
    waits = json.loads(ctl("--json", "allocate", "-n", "2", "--wait", "--dry-run").stdout)
    assert waits["outcome"] == "waits" and waits["would_wait"]["position"] == 1
    too_long = ctl("allocate", "-n", "1", "--ttl", "30d", "--dry-run")
    assert too_long.returncode == ctl("allocate", "-n", "1", "--ttl", "30d").returncode == 2
    with daemon.client() as client:
        assert len(client.leases()) == 1


def _preview_steps(lifecycle: LeaseLifecycle, ledger: Ledger, caller: Caller) -> int:
    """SQLite's virtual-machine steps of one preview of a GPU for `caller`."""

    def preview() -> None:
        assert lifecycle.preview(caller, AllocateSpec(count=1)).gpus

    return sqlite_steps(ledger, preview)


def test_a_preview_does_the_same_work_whatever_the_history(tmp_path: Path) -> None:
    """A user under budgets with 100 or 4,000 leases in the month: the preview's SQLite
    work (its budget read included) is the same, as a grant's is; it reads no history."""
    table = LimitsTable(default=Limits(max_gpu_hours_per_day=1e6, max_gpu_hours_per_month=1e6))
    counted = []
    for size in (100, 4000):
        ledger, gpus = open_ledger(tmp_path / f"{size}.sqlite3")
        step = 29 * DAY / size
        with ledger.unit_of_work():
            for n in range(size):
                held(ledger, gpus, 7, START + n * step, START + n * step + 30.0, first=n % 16)
        topology = open_inventory(LEDGER_INVENTORY).topology()
        now = START + 30 * DAY
        rules = SiteRules(limits=table)
        parts = SharedParts.of(ledger, topology, clock=lambda now=now: now, rules=rules)
        lifecycle = LeaseLifecycle(ledger, parts, clock=lambda now=now: now)
        counted.append(_preview_steps(lifecycle, ledger, Caller(7, 7, 1, "u7")))
        ledger.close()
    small, large = counted
    assert 0 < large <= small * 1.1 + 50, counted
