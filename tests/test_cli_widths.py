"""What a person sees at 80 and at 160 columns, on a real pseudo-terminal (pexpect): `usage`,
`limits` and `--help` fit 80 columns, and nothing of them is cut at 160.

The figures come from real users' leases on the recorded DGX-1 whose energy runs on a hand
clock (tests/test_energy_leases.py): long user names, a hundred GPU-hours, an estimated
kWh, a cost, a reservation with a long reason.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import DaemonPaths, wait_for
from tests.system_users import SystemUsers, open_to_everyone
from tests.test_energy_leases import Machine, ctl_json

pexpect = pytest.importorskip("pexpect", reason="the terminal tests need pexpect (test extra)")

REASON = "the quarterly evaluation of the speech models, agreed at the Monday meeting"
WIDTHS = (80, 160)


def on_terminal(socket: Path, columns: int, *args: str) -> list[str]:
    """`gpuallocctl ARGS` as root on a 40-line terminal `columns` wide: its lines."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(TERM="xterm", NO_COLOR="1")
    argv = ["-m", "gpuallocd.cli", "--socket", str(socket), *args]
    child = pexpect.spawn(
        sys.executable, argv, env=env, encoding="utf-8", timeout=60, dimensions=(40, columns)
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return [line.rstrip("\r") for line in child.before.split("\n") if line.strip()]


@pytest.fixture
def busy(system_users: SystemUsers, short_dir: Path, paths: DaemonPaths) -> Iterator[Machine]:
    """alice holds 2 GPUs under a kWh budget of 0.05 a day (0.0123 used); bob held 3 GPUs
    for 100 hours (90 kWh); carol a memory share (an estimate); a reservation with a long
    reason held a GPU."""
    users = system_users
    open_to_everyone(short_dir)
    alice = f"[limits.user.{users.name('alice')}]\nmax_kwh_per_day = 0.05\n"
    config = f"[limits]\nmax_gpus = 3\n{alice}"
    machine = Machine(
        paths,
        config,
        energy_interval_seconds=0.05,
        energy_price_per_kwh=0.32,
        energy_currency="EUR",
        shared_gpus=["7"],
        share_memory_reserve_bytes=0,
    )
    machine.daemon.start()
    try:
        bobs = ctl_json(users, "bob", machine, "allocate", "-n", "3", "--ttl", "7d")
        total = machine.fake.recording["devices"][7]["memory_total_bytes"]
        carols = ctl_json(users, "carol", machine, "allocate", "--memory", f"{total // 4}B")
        with machine.daemon.client() as root:
            root.reserve(count=1, start_in=0, duration=7200, user="root", reason=REASON)
        machine.clock.step(100 * 3600)
        wait_for(lambda: _kwh(users, machine, "bob") > 80, 30, what="bob's energy read")
        for who, lease in (("bob", bobs), ("carol", carols)):
            assert users.ctl(who, machine.daemon.paths.socket, "free", lease["id"]).returncode == 0
        ctl_json(users, "alice", machine, "allocate", "-n", "2", "--ttl", "7d")
        machine.clock.step(74)  # 2 GPUs at 300 W for 74 s: 0.01233 kWh of her 0.05
        wait_for(lambda: _kwh(users, machine, "alice") > 0.0123, 30, what="alice's energy read")
        yield machine
    finally:
        machine.daemon.stop()


def _kwh(users: SystemUsers, machine: Machine, who: str) -> float:
    report: dict[str, Any] = ctl_json(users, who, machine, "usage", "--user", users.name(who))
    return sum(row.get("energy_kwh", 0.0) for row in report["users"])


@pytest.mark.parametrize("columns", WIDTHS)
def test_usage_fits_80_columns_and_is_whole_at_160(
    system_users: SystemUsers, busy: Machine, columns: int
) -> None:
    """Every line of `usage` fits the terminal; the users, the cost column and the estimate
    are there; at 160 the reservation's reason is whole."""
    lines = on_terminal(busy.daemon.paths.socket, columns, "usage", "--since", "2d")
    assert max(len(line) for line in lines) <= columns, "\n".join(lines)
    text = "\n".join(lines)
    for who in ("alice", "bob", "carol"):
        assert system_users.name(who) in text
    assert "COST EUR" in text and "(estimate)" in text and "TOTAL" in text
    if columns == 160:
        assert REASON in text


@pytest.mark.parametrize("columns", WIDTHS)
def test_limits_show_what_remains_of_every_limit_in_significant_digits(
    system_users: SystemUsers, busy: Machine, columns: int
) -> None:
    """alice holds 2 of her 3 GPUs: REMAINING 1 (not `-`); her kWh budget of 0.05 a day
    beside a use of 0.0123 in significant digits, not `0.01` rounded to two places."""
    alice = system_users.name("alice")
    lines = on_terminal(busy.daemon.paths.socket, columns, "limits", "--user", alice)
    assert max(len(line) for line in lines) <= columns
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert rows["max_gpus"][1:] == ["3", "default", "2", "1"]
    kwh = rows["max_kwh_per_day"]
    value, source, current, remaining = kwh[1], " ".join(kwh[2:-2]), kwh[-2], kwh[-1]
    assert (value, source) == ("0.05", f"user {alice}")
    assert (current, remaining) == ("0.0123", "0.0377")


@pytest.mark.parametrize("columns", WIDTHS)
def test_help_gives_every_command_a_whole_summary(tmp_path: Path, columns: int) -> None:
    """`--help` lists each command with a summary that is never cut with `...`."""
    lines = on_terminal(tmp_path / "no-daemon.sock", columns, "--help")
    assert max(len(line) for line in lines) <= columns
    rows = [line for line in lines if line.startswith("  ") and line[2] not in " -"]
    assert not [row for row in rows if row.endswith("...")]
    listed = {row.split()[0] for row in rows}
    assert {"allocate", "run", "usage", "limits", "mcp", "doctor", "completion"} <= listed
    assert all(len(row.split()) > 2 for row in rows)  # a summary on the command's own line
