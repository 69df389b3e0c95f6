"""The terminal's small things, at 80 and 160 columns (pexpect): memory of a topology file
reads as a total, not as memory in use; one duration style; messages in the units the
option takes; `leases` says what a unit is and how long it has been held; `allocate` says
how to give a lease back; `admin-log` shows short UUIDs; `--help` lists commands in the
groups of docs/cli.md; and, off the terminal, PRIO never reads -0.00, the daemon log and
`history` name users and the idle-reclaim rule, `doctor`'s fixes line up."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable

import pytest

from gpuallocd.allocator.leases.events_log import Transition, format_transition
from gpuallocd.cli.administering.doctor import _line
from gpuallocd.cli.administering.doctor_checks import Check
from gpuallocd.cli.looking.reservation_text import with_priorities
from gpuallocd.host.users import user_name
from gpuallocd.model import LeaseEvent
from gpuallocd.model.actors import IDLE_RECLAIM, actor_name
from tests.harness import ThreadDaemon
from tests.test_terminal_width import ESCAPES, at_terminal, pexpect

GIB = 2**30
WIDTHS = [80, 160]


@pytest.fixture
def a100(start_daemon: Callable[..., ThreadDaemon]) -> ThreadDaemon:
    """The recorded DGX A100 (MIG on GPU 7), GPUs 2-3 shared."""
    return start_daemon(
        inventory="nvml-recording:dgx-a100-mig", default_policy="simple", shared_gpus=("2", "3")
    )


@pytest.mark.parametrize("columns", WIDTHS)
def test_memory_of_a_topology_file_reads_as_a_total(
    start_daemon: Callable[..., ThreadDaemon], columns: int
) -> None:
    """example:dgx-a100 has sizes but no live readings: `80.0 GiB total`, never as used."""
    daemon = start_daemon(inventory="example:dgx-a100", default_policy="simple")
    lines = at_terminal(daemon, columns, "status")
    rows = [line for line in lines[2:] if line.split() and line.split()[0].isdigit()]
    assert rows and all("GiB total" in row for row in rows), lines


@pytest.mark.parametrize("columns", WIDTHS)
def test_allocate_says_when_and_how_to_give_it_back(daemon: ThreadDaemon, columns: int) -> None:
    lines = at_terminal(daemon, columns, "allocate", "-n", "1", "--ttl", "2h")
    lease_id = lines[0].split()[1]
    assert re.fullmatch(r"expires in 1h59m|expires in 2h00m", lines[1]), lines
    assert f"gpuallocctl free {lease_id}" in lines[2]


@pytest.mark.parametrize("columns", WIDTHS)
def test_messages_use_the_options_units(daemon: ThreadDaemon, columns: int) -> None:
    """`--ttl 10d` over the node's 7-day maximum: said in days, not ttl_seconds=604800."""
    text = " ".join(at_terminal_failing(daemon, columns, "allocate", "-n", "1", "--ttl", "10d"))
    assert "a TTL of 10d" in text and "at most 7d" in text
    assert "604800" not in text and "864000" not in text and "ttl_seconds may" not in text


def at_terminal_failing(daemon: ThreadDaemon, columns: int, *args: str) -> list[str]:
    """As `at_terminal`, for a command expected to fail with exit 2."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env |= {"TERM": "xterm", "NO_COLOR": "1"}
    argv = ["-m", "gpuallocd.cli", "--socket", str(daemon.paths.socket), *args]
    child = pexpect.spawn(
        sys.executable, argv, env=env, encoding="utf-8", timeout=30, dimensions=(60, columns)
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 2, child.before
    return [ESCAPES.sub("", line) for line in child.before.replace("\r\n", "\n").splitlines()]


@pytest.mark.parametrize("columns", WIDTHS)
def test_leases_say_what_a_unit_is_and_how_long_it_is_held(
    a100: ThreadDaemon, columns: int
) -> None:
    with a100.client() as client:
        whole = client.allocate(1, label="whole")
        mig = client.allocate(mig_profile="1g.10gb", label="slice")
        share = client.allocate(memory_bytes=20 * GIB, label="part")
    lines = at_terminal(a100, columns, "leases")
    header = lines[0].split()
    assert "UNIT" in header and "TIME" in header
    rows = {line.split()[0]: line for line in lines[1:]}
    assert " GPU " in rows[whole.id] and "MIG 1g.10gb" in rows[mig.id]
    assert "share 20 GiB" in rows[share.id]


@pytest.mark.parametrize("columns", WIDTHS)
def test_admin_log_shows_short_uuids(daemon: ThreadDaemon, columns: int) -> None:
    with daemon.client() as client:
        uuid = client.status()[0].uuid
        client.drain([0], reason="fan")
    text = "\n".join(at_terminal(daemon, columns, "admin-log"))
    assert uuid not in text and uuid[:12] in text


@pytest.mark.parametrize("columns", WIDTHS)
def test_help_lists_commands_in_groups(daemon: ThreadDaemon, columns: int) -> None:
    """The groups of docs/cli.md, in its order, each naming its commands."""
    lines = at_terminal(daemon, columns, "--help")
    titles = [line.rstrip(":") for line in lines if line.endswith(":") and not line[0].isspace()]
    assert titles[1:] == [
        "Leasing",
        "Looking",
        "Administering",
        "Notifications",
        "Agents",
        "Integrations",
        "Without a daemon, and hardware",
        "Shell completion",
    ]
    leasing = lines.index("Leasing:")
    assert lines[leasing + 1].split()[0] == "allocate"


def test_priority_never_reads_minus_zero() -> None:
    waiter = {"priority": {"priority": -0.001}}
    _, rows = with_priorities(("POS", "USER"), [waiter], [(1, "ana")])
    assert rows[0][1] == "0.00"


def test_log_and_history_name_users_and_the_idle_reclaim_rule() -> None:
    """`by=nobody`, not `by=uid:65534`; an idle reclaim (made as root) is `idle-reclaim`."""
    from gpuallocd.model import Lease, LeasedGpu

    lease = Lease(
        id="abc",
        gpus=(LeasedGpu(index=0, uuid="GPU-1"),),
        owner_uid=1000,
        owner_name="ana",
        pid=None,
        label=None,
        policy="simple",
        created_at=0.0,
        expires_at=60.0,
    )
    revoked = format_transition(Transition(LeaseEvent.REVOKED, lease, 65534, "make room"))
    assert "by=nobody" in revoked and "uid:" not in revoked
    reclaimed = Transition(LeaseEvent.REVOKED, lease, 0, "idle reclaim: no process for 30 min")
    assert f"by={IDLE_RECLAIM}" in format_transition(reclaimed)
    assert actor_name(0, "idle reclaim: no process", user_name) == IDLE_RECLAIM
    assert actor_name(0, "maintenance", user_name) == "root"


def test_doctor_fixes_line_up_under_their_message() -> None:
    checks = [
        Check("socket", "warn", "the socket is world-writable", fix="chmod 0660 it"),
        Check("a-much-longer-check-name", "fail", "bad", fix="do the thing"),
    ]
    width = max(17, *(len(c.name) for c in checks))
    for check in checks:
        first, second = _line(check, False, width).splitlines()
        assert second.index("fix:") == first.index(check.message)
