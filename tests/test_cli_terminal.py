"""gpuallocctl on a real pseudo-terminal, as a person at a terminal sees it (pexpect).

What a terminal gets and a pipe does not: frames of `status --watch` drawn in place with
colour, the waiting line redrawn on one line, and Ctrl-C typed at the keyboard.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest
from click.testing import CliRunner

from gpuallocd.cli import cli
from tests.harness import ThreadDaemon

pexpect = pytest.importorskip("pexpect", reason="the terminal tests need pexpect (test extra)")

GREEN = "\x1b[32m"
HOME, CLEAR_SCREEN, CLEAR_LINE = "\x1b[H", "\x1b[2J", "\x1b[K"


def terminal(daemon: ThreadDaemon, *args: str, no_color: bool = False) -> Any:
    """gpuallocctl ARGS on a 40x120 pseudo-terminal."""
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm"
    if no_color:
        env["NO_COLOR"] = "1"
    argv = ["-m", "gpuallocd.cli", "--socket", str(daemon.paths.socket), *args]
    return pexpect.spawn(
        sys.executable, argv, env=env, encoding="utf-8", timeout=30, dimensions=(40, 120)
    )


def ctl_json(daemon: ThreadDaemon, *args: str) -> Any:
    result = CliRunner().invoke(cli, ["--socket", str(daemon.paths.socket), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_status_watch_redraws_in_place_until_ctrl_c(daemon: ThreadDaemon) -> None:
    """The screen is cleared once, each frame starts at the top left, a new lease shows up,
    and Ctrl-C ends the watch with status 0."""
    child = terminal(daemon, "status", "--watch", "0.2")
    child.expect_exact(CLEAR_SCREEN)
    child.expect_exact(HOME + "every 0.2s, Ctrl-C to stop")
    child.expect_exact(GREEN + "free")  # colour on a terminal
    ctl_json(daemon, "allocate", "-n", "1", "--label", "seen-live")
    child.expect_exact("root (seen-live)")
    child.expect_exact(HOME + "every 0.2s")  # and the next frame again from the top
    child.sendintr()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_no_color_keeps_the_terminal_plain(daemon: ThreadDaemon) -> None:
    """NO_COLOR on a terminal: the same table, no colour codes."""
    child = terminal(daemon, "status", no_color=True)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and "free" in child.before and "\x1b[" not in child.before


def test_waiting_line_is_redrawn_in_place_then_the_command_runs(daemon: ThreadDaemon) -> None:
    """While queued one line is rewritten (carriage return, clear to end); once the GPUs
    come free the line is wiped and the command runs."""
    holder = ctl_json(daemon, "allocate", "-n", "4")
    child = terminal(daemon, "run", "-n", "1", "--wait", "--", sys.executable, "-c", "print('ran')")
    child.expect_exact("\rgpuallocctl: queued 1 of 1 (")
    child.expect_exact("Resources: wants 1 GPU(s); 0 free; start in ~")
    child.expect_exact(CLEAR_LINE)
    child.expect_exact("\rgpuallocctl: queued 1 of 1 (")  # redrawn, not a new line
    assert "\n" not in child.before
    ctl_json(daemon, "free", holder["id"])
    child.expect_exact("\r" + CLEAR_LINE + "gpuallocctl: lease ")
    child.expect_exact("ran")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_ctrl_c_at_the_terminal_while_queued_leaves_the_queue(daemon: ThreadDaemon) -> None:
    """Ctrl-C typed while queued: exit status 130, nobody left in the queue."""
    ctl_json(daemon, "allocate", "-n", "4")
    child = terminal(daemon, "allocate", "-n", "2", "--wait")
    child.expect_exact("\rgpuallocctl: queued 1 of 1 (")
    child.sendintr()
    child.expect_exact("left the queue")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert ctl_json(daemon, "queue")["waiters"] == []
