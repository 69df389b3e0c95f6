"""`run --preemptible` and `run --requeue` (docs/preemption.md).

A preemptible `run` tells its command of a preemption two ways besides the signal the daemon
sends it: one line on stderr, and the file that GPUALLOCD_PREEMPT_FILE names, written at the
warning (JSON: `deadline_at`, `signal_at`, `signal`, `for`, `explanation`), in a directory of
this user's own that `run` removes at its end. The command saves, acknowledges
(`gpuallocctl checkpoint-done PATH`, which ends the lease) and exits; `run` says so and exits
8, unless the command finished its work anyway.

`--requeue`: `run` stays outside the lease, as a supervisor, and runs each attempt in a
process of its own (a fork: the attempt holds the lease, so the kill at a deadline never
reaches the supervisor). An attempt that was preempted is started again, waiting at the old
place in the queue (`requeue_of`), with GPUALLOCD_CHECKPOINT set to the last checkpoint any
attempt acknowledged. The supervisor passes SIGTERM, SIGHUP and SIGQUIT on to the attempt,
and exits with the last attempt's code.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import click

from gpuallocd.cli.errors import EXIT_ERROR, EXIT_PREEMPTED, as_cli_error
from gpuallocd.cli.text import escape_unprintable

__all__ = [
    "CHECKPOINT_VARIABLE",
    "EXIT_PREEMPTED",
    "PREEMPT_FILE_VARIABLE",
    "Outcome",
    "outcome_of",
    "preempt_file",
    "run_requeued",
]

PREEMPT_FILE_VARIABLE = "GPUALLOCD_PREEMPT_FILE"
CHECKPOINT_VARIABLE = "GPUALLOCD_CHECKPOINT"
PASSED_ON = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

Attempt = Callable[[dict[str, Any], Callable[[str], None]], int]


@contextlib.contextmanager
def preempt_file() -> Iterator[Callable[[dict[str, Any]], None]]:
    """GPUALLOCD_PREEMPT_FILE set for the command (a path in a fresh 0700 directory of this
    user's); yields the function that writes it at a warning; removes the directory after."""
    directory = Path(tempfile.mkdtemp(prefix="gpuallocctl-preempt-"))
    path = directory / "preempted.json"
    os.environ[PREEMPT_FILE_VARIABLE] = str(path)

    def write(preemption: dict[str, Any]) -> None:
        keep = ("deadline_at", "signal_at", "signal", "for", "explanation", "lease_id")
        told = {key: preemption.get(key) for key in keep}
        partial = directory / "preempted.json.new"
        partial.write_text(json.dumps(told) + "\n")
        partial.replace(path)  # whole or absent, never half written

    try:
        yield write
    finally:
        os.environ.pop(PREEMPT_FILE_VARIABLE, None)
        shutil.rmtree(directory, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a preemptible lease ended: `preempted` (it was, whatever the command did after),
    `checkpoint` (the last one acknowledged), `detail` in words."""

    preempted: bool
    checkpoint: str | None
    detail: str


def outcome_of(client: Any, lease_id: str, code: int) -> Outcome:
    """Ask the daemon: preempted, or the command ended on its own. A lease under preemption
    whose command did not exit 0 (it died of the signal, say) was preempted too."""
    with contextlib.suppress(Exception):
        data = client.request("GET", f"/v1/leases/{lease_id}")
        preemption = data.get("preemption") or {}
        checkpoint = (data.get("last_checkpoint") or {}).get("path")
        if data.get("state") == "preempted" or (preemption and code != 0):
            why = escape_unprintable(str(preemption.get("explanation") or "preempted"))
            how = escape_unprintable(str(preemption.get("state") or ""))
            return Outcome(True, checkpoint, f"{why} ({how})")
        return Outcome(False, checkpoint, "")
    return Outcome(False, None, "")


def _attempt_in_child(attempt: Attempt, request: dict[str, Any]) -> tuple[int, str]:
    """Fork; the child runs one attempt (it holds the lease) and writes its lease id to a
    pipe; the parent waits, passing signals on. The attempt's code and lease id."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the attempt
        os.close(read_end)
        code = EXIT_ERROR
        try:
            code = attempt(request, lambda lease_id: _tell(write_end, lease_id))
        except click.ClickException as exc:
            exc.show()
            code = exc.exit_code
        except Exception as exc:
            mapped = as_cli_error(exc)
            if mapped is None:
                raise
            mapped.show()
            code = mapped.exit_code
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code)
    os.close(write_end)
    code = _wait_passing_signals(pid)
    with os.fdopen(read_end, "rb") as told:
        lease_id = told.read(256).decode(errors="replace").strip()
    return code, lease_id


def _tell(fd: int, lease_id: str) -> None:
    os.write(fd, lease_id.encode())
    os.close(fd)


def _wait_passing_signals(pid: int) -> int:
    def pass_on(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    previous = {sig: signal.signal(sig, pass_on) for sig in PASSED_ON}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the attempt's
    try:
        while True:
            try:
                _, status = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return os.waitstatus_to_exitcode(status) if status else 0


def run_requeued(client_of: Callable[[], Any], attempt: Attempt, request: dict[str, Any]) -> int:
    """Attempts until one ends without being preempted; its exit code (128+N if killed)."""
    checkpoint = os.environ.get(CHECKPOINT_VARIABLE)
    requeue_of: str | None = None
    while True:
        if checkpoint is not None:
            os.environ[CHECKPOINT_VARIABLE] = checkpoint
        code, lease_id = _attempt_in_child(attempt, {**request, "requeue_of": requeue_of})
        code = 128 - code if code < 0 else code
        if not lease_id:
            return code  # never granted: refused, or left the queue
        with client_of() as client:
            outcome = outcome_of(client, lease_id, code)
        if not outcome.preempted:
            return code
        checkpoint = outcome.checkpoint or checkpoint
        shown = escape_unprintable(checkpoint) if checkpoint else "none acknowledged"
        click.echo(
            f"gpuallocctl: lease {lease_id} was preempted: {outcome.detail}; requeued at its "
            f"place in the queue (checkpoint: {shown})",
            err=True,
        )
        requeue_of = lease_id
        request = {**request, "wait": True, "timeout": None}
