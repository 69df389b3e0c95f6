"""What the docs say and what the commands do agree: a running reservation's GPUs name it in
`status`; `plan` takes the `mig.json` docs/sharing.md makes (or the recording itself); a bad
topology file exits 2 as docs/cli.md says; `history --limit N` prints N rows; `usage --user`
is that user's alone; `leases --user` of nobody known exits as `limits` does; `queue -v`
never calls free what `status` shows reserved; the agents' install command is the one that
works on the README's install."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gpuallocd.cli import cli
from tests.harness import ThreadDaemon, ctl_argv, wait_for

HOUR = 3600.0


def ctl(daemon: ThreadDaemon | None, *args: str) -> Result:
    socket = ["--socket", str(daemon.paths.socket)] if daemon else []
    return CliRunner().invoke(cli, [*socket, *args])


def ctl_json(daemon: ThreadDaemon, *args: str) -> Any:
    result = ctl(daemon, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _gpu_rows(daemon: ThreadDaemon) -> dict[int, str]:
    lines = ctl(daemon, "status").output.splitlines()[2:]
    return {int(line.split()[0]): line for line in lines if line.split()[0].isdigit()}


def test_status_names_the_reservation_a_gpu_is_held_for(daemon: ThreadDaemon) -> None:
    """`held for reservation ID (user)`, as docs/scheduling.md says, not `(queue 0)`."""
    with daemon.client() as client:
        made = client.reserve(count=1, start_in=0, duration=HOUR, user="nobody", reason="demo")
    index = made["gpu_indices"][0]
    wait_for(lambda: "reserved" in _gpu_rows(daemon)[index], timeout=20, what="the start")
    row = _gpu_rows(daemon)[index]
    assert f"held for reservation {made['id']} (nobody)" in row and "queue 0" not in row


def test_plan_takes_the_mig_json_the_docs_make_and_the_recording(tmp_path: Path) -> None:
    """docs/sharing.md: `topology --inventory nvml-recording:dgx-a100-mig --json > mig.json`
    then `plan --topology mig.json -n 2 --mig 1g.10gb`; the recording's name works too."""
    made = ctl(None, "topology", "--inventory", "nvml-recording:dgx-a100-mig", "--json")
    assert made.exit_code == 0, made.output
    mig = tmp_path / "mig.json"
    mig.write_text(made.output)
    for topology in (str(mig), "nvml-recording:dgx-a100-mig"):
        planned = ctl(None, "--json", "plan", "--topology", topology, "-n", "2", "--mig", "1g.10gb")
        assert planned.exit_code == 0, planned.output
        assert len(json.loads(planned.output)["uuids"]) == 2


@pytest.mark.parametrize("command", ["plan", "simulate", "topology"])
@pytest.mark.parametrize("content", [None, "{not json", "GPU0 GPU1 no matrix here"])
def test_a_bad_topology_file_exits_2(tmp_path: Path, command: str, content: str | None) -> None:
    """Missing, not JSON, not a matrix: one line, exit 2 (docs/cli.md: a bad topology file)."""
    path = tmp_path / "node.json"
    if content is not None:
        path.write_text(content)
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"op": "allocate", "id": "a", "count": 1}\n')
    args = {
        "plan": ["plan", "--topology", str(path), "-n", "1"],
        "simulate": ["simulate", "--topology", str(path), "--trace", str(trace)],
        "topology": ["topology", "--from", str(path)],
    }[command]
    done = subprocess.run(
        ctl_argv(Path("/nonexistent.sock"), *args), capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_history_limit_counts_reservation_events_too(daemon: ThreadDaemon) -> None:
    """Lease and reservation events together: `--limit 8` prints 8 rows, the latest."""
    with daemon.client() as client:
        for _ in range(6):
            client.free(client.allocate(1).id)
        for _ in range(3):
            made = client.reserve(count=1, start_in=HOUR, duration=HOUR, user="nobody", reason="r")
            client.unreserve(made["id"])
    rows = ctl(daemon, "history", "--limit", "8").output.splitlines()[1:]
    assert len(rows) == 8
    assert rows[-1].split()[2] == "reservation" and "cancelled" in rows[-1]


def test_usage_for_one_user_shows_only_theirs(daemon: ThreadDaemon) -> None:
    """`usage --user nobody`: nobody's reservations and fair-share figure, not root's."""
    with daemon.client() as client:
        client.free(client.allocate(2).id)
        client.reserve(count=1, start_in=0, duration=HOUR, user="root", reason="root's")
        client.reserve(count=1, start_in=0, duration=HOUR, user="nobody", reason="nobody's")
    everyone = ctl_json(daemon, "usage", "--since", "1d")
    assert {r["for"] for r in everyone["reservations"]} == {"root", "nobody"}
    assert "root" in everyone["fair_share"]
    theirs = ctl_json(daemon, "usage", "--since", "1d", "--user", "nobody")
    assert [r["for"] for r in theirs["reservations"]] == ["nobody"]
    assert set(theirs["fair_share"]) <= {"nobody"}
    text = ctl(daemon, "usage", "--since", "1d", "--user", "nobody").output
    assert "root's" not in text


def test_leases_of_an_unknown_user_exit_as_limits_do(daemon: ThreadDaemon) -> None:
    limits = ctl(daemon, "limits", "--user", "nosuchuser")
    leases = ctl(daemon, "leases", "--user", "nosuchuser")
    assert limits.exit_code == leases.exit_code == 2
    assert "no user 'nosuchuser' on this machine" in leases.output
    assert ctl(daemon, "leases", "--user", "root").exit_code == 0


def test_queue_detail_agrees_with_status(daemon: ThreadDaemon) -> None:
    """3 of 4 GPUs leased, a request for 2 waits: `status` shows the last GPU reserved for
    it, and `queue -v` says so, never `1 free`."""
    ctl_json(daemon, "allocate", "-n", "3", "--ttl", "30m")
    waiter = subprocess.Popen(
        ctl_argv(daemon.paths.socket, "allocate", "-n", "2", "--wait"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: ctl_json(daemon, "queue")["waiters"], timeout=20, what="the waiter")
        rows = _gpu_rows(daemon).values()
        assert sum("reserved" in row for row in rows) == 1
        assert not any(" free " in row for row in rows)
        detail = ctl(daemon, "queue", "-v").output.splitlines()[-1]
        assert detail == "1: wants 2 GPU(s); 1 reserved for it, 1 more to come"
    finally:
        waiter.kill()
        waiter.communicate(timeout=10)


def test_the_agents_install_command_is_the_environments_own_pip_everywhere_it_is_said() -> None:
    """docs/agents.md, the README and `gpuallocctl mcp --help` name the pip of the daemon's
    environment the README creates; no page says `pip install 'gpuallocd[mcp]'`, which no
    index serves."""
    root = Path(__file__).resolve().parent.parent
    command = "sudo /opt/gpuallocd/bin/pip install 'mcp>=2'"
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    texts = {page.name: " ".join(page.read_text().split()) for page in pages}
    assert command in texts["agents.md"] and command in texts["README.md"]
    assert "sudo /usr/bin/python3 -m venv /opt/gpuallocd" in texts["README.md"]
    assert not [name for name, text in texts.items() if "install 'gpuallocd[mcp]'" in text]
    assert command in " ".join(ctl(None, "mcp", "--help").output.split())
