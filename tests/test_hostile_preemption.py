"""A hostile pass over preemption, as real users: a checkpoint path made up to lure root (never
opened), paths with control characters or of any length (refused, nothing changes), a job
that ignores the signal and forks (killed whole at the deadline), a flood of
acknowledgements (one history line a minute), terms over the site's bounds (refused)."""

from __future__ import annotations

import ctypes
import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import wait_for
from tests.preempt_node import HOUR, MINUTE, Node
from tests.system_users import SystemUsers

IN_ACCESS, IN_MODIFY, IN_ATTRIB, IN_OPEN = 0x1, 0x2, 0x4, 0x20
IN_CLOSE = 0x8 | 0x10


@pytest.fixture
def node(short_dir: Path, system_users: SystemUsers) -> Iterator[Node]:
    node = Node(short_dir, system_users)
    yield node
    node.close()


class Opens:
    """Every open, read or close of the files of one directory, as inotify(7) tells it."""

    def __init__(self, directory: Path) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        mask = IN_ACCESS | IN_MODIFY | IN_ATTRIB | IN_OPEN | IN_CLOSE
        assert self._libc.inotify_add_watch(self._fd, os.fsencode(directory), mask) >= 0

    def seen(self) -> list[str]:
        found = []
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return found
        offset = 0
        while offset < len(data):
            _wd, mask, _cookie, size = struct.unpack_from("iIII", data, offset)
            name = data[offset + 16 : offset + 16 + size].rstrip(b"\0").decode()
            found.append(f"{name}:{mask:#x}")
            offset += 16 + size
        return found

    def close(self) -> None:
        os.close(self._fd)


def _preemptible(node: Node, short: str = "alice") -> str:
    done = node.ctl(short, "--json", "allocate", "-n", "4", "--preemptible", "--ttl", "2d")
    assert done.returncode == 0, done.stderr
    lease_id: str = json.loads(done.stdout)["id"]
    return lease_id


def test_a_made_up_checkpoint_path_is_recorded_and_never_opened(node: Node) -> None:
    """alice names root's files (a root-only file, a link to /etc/shadow) as her checkpoints,
    as progress and as the acknowledgement of a preemption: each path is recorded as given,
    and nothing opens, reads or even stats the files (inotify on their directory)."""
    bait = node.root / "bait"
    bait.mkdir(mode=0o700)
    secret = bait / "root-only"
    secret.write_text("root's\n")
    secret.chmod(0o600)
    (bait / "shadow").symlink_to("/etc/shadow")
    opens = Opens(bait)
    try:
        lease_id = _preemptible(node)
        first = node.ctl("alice", "checkpoint-done", str(secret), "--lease", lease_id)
        assert first.returncode == 0, first.stderr
        node.step(HOUR)
        node.start_ctl("bob", "bob", "allocate", "-n", "1", "--wait")
        node.until_event(lease_id, "preempt_warning")
        done = node.ctl("alice", "checkpoint-done", str(bait / "shadow"), "--lease", lease_id)
        assert done.returncode == 0, done.stderr
        assert node.lease(lease_id)["last_checkpoint"]["path"] == str(bait / "shadow")
        assert node.lease(lease_id)["preemption"]["checkpoint"] == str(bait / "shadow")
        assert opens.seen() == []
        secret.read_text()  # the watch itself sees an open: the silence above means none
        assert opens.seen() != []
    finally:
        opens.close()


@pytest.mark.parametrize(
    "path",
    [
        "/scratch/\x1b]0;owned\x07ckpt",
        "/scratch/a\nGPU 3 granted to bob",
        "/scratch/\u202etp.kpc",
        "/" + "a" * 5000,
        "   ",
    ],
    ids=["osc", "newline", "bidi", "5000-chars", "blank"],
)
def test_a_hostile_checkpoint_path_is_refused_and_changes_nothing(node: Node, path: str) -> None:
    """A path that could steer a terminal or forge a line, or past PATH_MAX, is refused with
    `invalid_request` (exit 2) before anything is recorded."""
    lease_id = _preemptible(node)
    script = (
        "import json, sys\n"
        "from gpulease import Client\n"
        "try:\n"
        "    Client(sys.argv[1]).checkpoint_done(sys.argv[2], json.loads(sys.argv[3]))\n"
        "    print('accepted')\n"
        "except Exception as exc:\n"
        "    print(exc.code)\n"
    )
    done = node.users.run("alice", ["-c", script, node.socket, lease_id, json.dumps(path)])
    assert done.stdout.strip() == "invalid_request", done.stderr
    assert "checkpoint_done" not in node.events(lease_id)
    assert "last_checkpoint" not in node.lease(lease_id)


def test_a_job_that_ignores_the_signal_and_forks_is_killed_whole_at_the_deadline(
    node: Node,
) -> None:
    """Under `run --preemptible`, a command that traps SIGTERM and leaves children behind:
    told through GPUALLOCD_PREEMPT_FILE (its own user's file), signalled, then at the deadline
    every process of it is killed, `run` says it was preempted and exits 8."""
    seen = node.work / "seen"
    command = (
        'trap "" TERM; sleep 600 & sleep 600 & '
        'while [ ! -e "$GPUALLOCD_PREEMPT_FILE" ]; do sleep 0.05; done; '
        f'cat "$GPUALLOCD_PREEMPT_FILE" > {seen}; '
        f'stat -c "%U %a" "$(dirname "$GPUALLOCD_PREEMPT_FILE")" >> {seen}; wait'
    )
    run = node.start_ctl("alice", "run", "run", "--preemptible", "-n", "4", "--ttl", "2d",
                         "--", "sh", "-c", command)  # fmt: skip
    wait_for(lambda: _one_lease(node) is not None, 30, what="alice's run")
    lease = _one_lease(node)
    assert lease is not None
    wait_for(lambda: len(lease_processes(node, lease)) >= 3, 30, what="the command and children")
    members = lease_processes(node, lease)
    node.step(HOUR)
    node.start_ctl("bob", "bob", "allocate", "-n", "1", "--wait")
    wait_for(
        lambda: seen.exists() and len(seen.read_text().splitlines()) == 2, 30, what="the file read"
    )
    told, owner = seen.read_text().splitlines()
    assert json.loads(told)["deadline_at"] == node.lease(lease)["preemption"]["deadline_at"]
    assert owner == f"{node.users.name('alice')} 700"
    node.step(MINUTE)
    node.until_event(lease, "preempt_signal")
    node.step(5 * MINUTE)
    node.until_event(lease, "preempted")
    assert run.wait(60) == 8, node.log("run")
    assert "was preempted" in node.log("run")
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in members), 30, what="all gone")


def _one_lease(node: Node) -> str | None:
    with node.client() as client:
        found = client.leases()
    return found[0].id if found else None


def lease_processes(node: Node, lease_id: str) -> list[int]:
    processes: list[int] = node.lease(lease_id)["processes"]
    return processes


def test_a_flood_of_acknowledgements_writes_a_history_line_a_minute(node: Node) -> None:
    """Fifty progress acknowledgements in a row: each recorded as the last checkpoint, one
    history line for them all within the minute, the next after it."""
    lease_id = _preemptible(node)
    script = (
        "import sys\n"
        "from gpulease import Client\n"
        "c = Client(sys.argv[1])\n"
        "for n in range(50):\n"
        "    c.checkpoint_done(sys.argv[2], f'/scratch/step-{n}.pt')\n"
    )
    done = node.users.run("alice", ["-c", script, node.socket, lease_id])
    assert done.returncode == 0, done.stderr
    assert node.events(lease_id).count("checkpoint_done") == 1
    assert node.lease(lease_id)["last_checkpoint"]["path"] == "/scratch/step-49.pt"
    node.step(MINUTE)
    node.ctl("alice", "checkpoint-done", "/scratch/next.pt", "--lease", lease_id)
    assert node.events(lease_id).count("checkpoint_done") == 2


def test_terms_past_the_sites_bounds_are_refused_and_grant_nothing(node: Node) -> None:
    """A minimum runtime longer than the site's (30m) is quota_exceeded (exit 6); a term
    without --preemptible is a usage error (exit 2) and, through the API, invalid_request;
    SIGKILL as the signal is refused; nothing is leased by any of them."""
    longer = node.ctl("alice", "allocate", "-n", "1", "--preemptible", "--min-runtime", "1d")
    assert longer.returncode == 6 and "preempt_min_runtime_seconds" in longer.stderr
    alone = node.ctl("alice", "allocate", "-n", "1", "--grace", "1h")
    assert alone.returncode == 2
    kill = node.ctl("alice", "allocate", "-n", "1", "--preemptible", "--signal", "KILL")
    assert kill.returncode == 2 and "preempt_signal" in kill.stderr
    script = (
        "from gpulease import Client\nimport sys\n"
        "try:\n"
        "    Client(sys.argv[1]).request('POST', '/v1/leases', "
        "{'count': 1, 'preempt_grace_seconds': 5})\n"
        "    print('granted')\n"
        "except Exception as exc:\n"
        "    print(exc.code)\n"
    )
    api = node.users.run("alice", ["-c", script, node.socket])
    assert api.stdout.strip() == "invalid_request"
    with node.client() as client:
        assert client.leases() == []
