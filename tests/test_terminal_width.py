"""`status` at a real terminal's width (pexpect at 80 and 160 columns): nothing cut at 160,
no row wrapped at 80 (columns dropped by priority), and a share's or a MIG instance's row
naming its label, not its lease id."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import Any

import pytest
from gpulease import Client

from tests.harness import ThreadDaemon

pexpect = pytest.importorskip("pexpect", reason="the terminal tests need pexpect (test extra)")

GIB = 2**30
ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
LONG_LABEL = "sweep-lr3e-4-batch512-warmup2000-seed7"


def at_terminal(daemon: ThreadDaemon, columns: int, *args: str) -> list[str]:
    """gpuallocctl ARGS on a pseudo-terminal `columns` wide: its lines, colour removed."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env |= {"TERM": "xterm", "NO_COLOR": "1"}
    argv = ["-m", "gpuallocd.cli", "--socket", str(daemon.paths.socket), *args]
    child = pexpect.spawn(
        sys.executable, argv, env=env, encoding="utf-8", timeout=30, dimensions=(60, columns)
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    return [ESCAPES.sub("", line) for line in child.before.replace("\r\n", "\n").splitlines()]


@pytest.fixture
def busy_node(start_daemon: Callable[..., ThreadDaemon]) -> tuple[ThreadDaemon, dict[str, Any]]:
    """The recorded DGX A100 (MIG on GPU 7), shares on GPUs 2-3: a whole-GPU lease, a MIG
    instance and a share, each with a long label."""
    daemon = start_daemon(
        inventory="nvml-recording:dgx-a100-mig", default_policy="simple", shared_gpus=("2", "3")
    )
    with Client(daemon.paths.socket) as client:
        leases = {
            "gpu": client.allocate(1, label=LONG_LABEL, ttl=8 * 3600),
            "mig": client.allocate(mig_profile="1g.10gb", label="mig-" + LONG_LABEL),
            "share": client.allocate(memory_bytes=20 * GIB, label="share-" + LONG_LABEL),
        }
    return daemon, leases


def test_status_at_160_columns_cuts_nothing(busy_node: tuple[ThreadDaemon, dict[str, Any]]) -> None:
    """Every column, every label and the time left whole, every line within 160."""
    daemon, _ = busy_node
    lines = at_terminal(daemon, 160, "status")
    assert all(len(line) <= 160 for line in lines)
    assert "UUID" in lines[1] and "NAME" in lines[1] and "UTIL" in lines[1]
    text = "\n".join(lines)
    assert "…" not in text
    assert f"root ({LONG_LABEL}) 8h00m left" in text or f"root ({LONG_LABEL}) 7h59m left" in text


def test_status_at_80_columns_wraps_no_row(busy_node: tuple[ThreadDaemon, dict[str, Any]]) -> None:
    """At 80 columns no line passes 80: the UUID and the model go first; IDX, STATE and
    HOLDER stay, the holder cut with an ellipsis where it must be."""
    daemon, _ = busy_node
    lines = at_terminal(daemon, 80, "status")
    assert max(len(line) for line in lines) <= 80
    header = lines[1].split()
    assert header[0] == "IDX" and "STATE" in header and header[-1] == "HOLDER"
    assert "UUID" not in header


def test_share_and_mig_rows_show_the_label_not_the_lease_id(
    busy_node: tuple[ThreadDaemon, dict[str, Any]],
) -> None:
    daemon, leases = busy_node
    text = "\n".join(at_terminal(daemon, 160, "status"))
    assert f"root (mig-{LONG_LABEL})" in text and f"root (share-{LONG_LABEL})" in text
    assert leases["mig"].id not in text and leases["share"].id not in text
