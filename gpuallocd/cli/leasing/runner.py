"""A command run under a lease: lease, start it, forward signals, wait for its whole tree,
free the lease, and say how it ended. What `run` and `shell` do once their options are read.

The lease covers the command and every process it starts: `run` makes itself their
subreaper (PR_SET_CHILD_SUBREAPER), so an orphaned process of the command comes back to it,
and it waits for all of them before it frees the lease. The daemon follows the same tree
through /proc, so a `kill -9` of `run` leaves the command its lease. A revoke stops the
command: `run` hears it at once (`revoke_watch.py`) and stops its command itself, and the
daemon stops the lease's processes too (the lease asks for `on_revoke: "terminate"`), which
also covers a command whose `run` is gone; `run` then prints why and exits 7. A preemptible
lease's warning is written to the file GPUALLOCD_PREEMPT_FILE names (`preempted.py`), and a
preempted `run` exits 8.

No click here: `run` is how jobs start, and its plain forms are read without click
(`quick_run.py`); both ways end in `run_leased`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from types import FrameType
from typing import Any

from gpuallocd.cli.exit_codes import EXIT_PREEMPTED, EXIT_REVOKED
from gpuallocd.cli.text import escape_unprintable

__all__ = [
    "FORWARDED_SIGNALS",
    "is_revoked",
    "lease_request",
    "print_notice",
    "revocation_reason",
    "run_command",
    "run_leased",
    "say",
]

# SIGINT is not forwarded: a Ctrl-C at the terminal reaches the command directly (it shares
# our process group), and forwarding it too would interrupt it twice. It is ignored here
# while the command runs, so the lease is freed after the command has handled it.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
PR_SET_CHILD_SUBREAPER = 36
MAX_LABEL = 200
WATCH_LAST_WORDS_SECONDS = 5.0  # at most; the watch's answer for a revoked lease is at once

QueueDisplay = Callable[[], AbstractContextManager[None]]


def say(text: str) -> None:
    """One line on stderr, at once (as `click.echo(..., err=True)` writes it)."""
    if sys.stderr is not None:
        sys.stderr.write(f"{text}\n")
        sys.stderr.flush()


def lease_request(
    command: Sequence[str], label: str | None, options: dict[str, Any]
) -> dict[str, Any]:
    """`gpu_lease`'s arguments from `run`'s options (by their option names); the label is
    the command where none is given."""
    request = dict(options)
    request["label"] = label or escape_unprintable(" ".join(command))[:MAX_LABEL]
    request["min_free_memory_bytes"] = request.pop("min_free_memory")
    return request


@contextlib.contextmanager
def _forward_signals(child: subprocess.Popen[bytes]) -> Iterator[None]:
    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _become_subreaper() -> None:
    """Orphans of the command are re-parented to us, not to init (Linux 3.4 and later)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reap_the_rest() -> None:
    """Wait for every remaining descendant (orphans handed to us as their subreaper)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def run_command(command: Sequence[str], started: Any = None) -> int:
    """Run `command` with our environment, forwarding signals; its exit code (128+N if
    killed). `started()` is called once it runs; returns after its last descendant exited."""
    _become_subreaper()
    try:
        child = subprocess.Popen(list(command), env=dict(os.environ))
    except FileNotFoundError:
        say(f"gpuallocctl: command not found: {escape_unprintable(command[0])}")
        return 127
    except PermissionError:
        say(f"gpuallocctl: permission denied: {escape_unprintable(command[0])}")
        return 126
    with _forward_signals(child):
        if started is not None:
            started()
        code = child.wait()
        _reap_the_rest()
    return 128 - code if code < 0 else code


def is_revoked(client: Any, lease_id: str) -> bool:
    with contextlib.suppress(Exception):
        return bool(client.lease(lease_id).state == "revoked")
    return False


def revocation_reason(socket: str | None, lease_id: str) -> str:
    """Why the lease was revoked: the reason its revoke gave, or 'no reason given'."""
    from gpulease import Client

    with contextlib.suppress(Exception), Client(socket) as client:
        events = [e for e in client.history(lease_id) if e["event"] == "revoked"]
        if events and events[-1]["detail"]:
            return str(events[-1]["detail"])
    return "no reason given"


def _announce_command(client: Any, lease_id: str, ttl: float | None) -> None:
    """A renewal makes the daemon look for the command's processes at once."""
    with contextlib.suppress(Exception):
        client.renew(lease_id, ttl)


def print_notice(event: dict[str, Any]) -> None:
    """An event of the lease meant for its holder, as one line on stderr."""
    detail = escape_unprintable(str(event.get("detail") or ""))
    say(f"gpuallocctl: lease {event['lease_id']}: {event['event']}: {detail}")


def run_leased(
    socket: str | None,
    quiet: bool,
    command: Sequence[str],
    request: dict[str, Any],
    queue_display: QueueDisplay = contextlib.nullcontext,
    granted_to: Callable[[str], None] | None = None,
) -> int:
    """Lease as `request` says (gpu_lease's arguments), run `command` under it, free it; the
    command's exit code, EXIT_REVOKED or EXIT_PREEMPTED. `quiet` (--json) leaves out the
    lease's line; `queue_display()` is entered while the request may wait (the waiting line
    of --wait); `granted_to(lease_id)` is told of the grant (`run --requeue`'s supervisor).

    Whether an admin revoked the lease is the free's answer: the free finds the lease
    already ended as revoked (`gpu_lease.end_state`); no request of its own asks.
    """
    if not request.get("preemptible"):
        return _run_leased(socket, quiet, command, request, queue_display, granted_to, None)
    from gpuallocd.cli.leasing.preempted import preempt_file

    with preempt_file() as write:
        return _run_leased(socket, quiet, command, request, queue_display, granted_to, write)


def _run_leased(
    socket: str | None,
    quiet: bool,
    command: Sequence[str],
    request: dict[str, Any],
    queue_display: QueueDisplay,
    granted_to: Callable[[str], None] | None,
    write_preempt_file: Callable[[dict[str, Any]], None] | None,
) -> int:
    from gpulease import Client, gpu_lease
    from gpulease.renewer import idle_message

    from gpuallocd.cli.leasing.revoke_watch import RevokeWatch

    request = dict(request)
    count, gpus = request.pop("count"), request.pop("gpus")
    if count is None and not gpus:
        count = 1
    if request.get("preemptible"):
        request["raise_preempt_signal"] = False  # the command gets it from the daemon
    lease = gpu_lease(
        count or 1,
        gpus=list(gpus) or None,
        socket=socket,
        on_idle=lambda lease, idle: say(f"gpuallocctl: {idle_message(lease, idle)}"),
        on_revoke="terminate",
        **request,
    )
    preempted: str | None = None
    with contextlib.ExitStack() as stack:
        with queue_display():
            granted = stack.enter_context(lease)
        if granted_to is not None:
            granted_to(granted.id)
        client = lease.client  # the lease's own connection: no second connect and check
        if not quiet:
            gpu_list = ",".join(g.uuid if g.kind == "mig" else str(g.index) for g in granted.gpus)
            say(f"gpuallocctl: lease {granted.id}: GPU {gpu_list}")
            if granted.raw.get("power_limit_requested_watts") is not None:
                from gpuallocd.model.power import cap_text  # only then: `run` starts lean

                say(f"gpuallocctl: lease {granted.id}: {cap_text(granted.raw)}")
        ttl = request.get("ttl")
        watch = RevokeWatch(
            lambda: Client(socket),
            granted.id,
            print_notice,
            on_preempt=write_preempt_file or (lambda preemption: None),
        )

        def started() -> None:
            if not lease.nested:  # the enclosing lease's TTL is its holder's to set
                _announce_command(client, granted.id, ttl)
            watch.start()

        code = run_command(command, started=started)
        watch.command_ended.set()
        # The enclosing lease is its holder's to free: ask whether it was revoked meanwhile.
        revoked = lease.nested and is_revoked(client, granted.id)
        if write_preempt_file is not None:
            preempted = _preempted(client, granted.id, code)
    if revoked or lease.end_state == "revoked":
        # the watch answers at once for a revoked lease: its last notices go before our line
        watch.join(timeout=WATCH_LAST_WORDS_SECONDS)
        reason = revocation_reason(socket, granted.id)
        say(f"gpuallocctl: lease {granted.id} was revoked ({reason}); the command was stopped")
        return EXIT_REVOKED
    if preempted is not None:
        if granted_to is None:  # with --requeue its supervisor says it, and what follows
            say(f"gpuallocctl: lease {granted.id} was preempted: {preempted}")
        return EXIT_PREEMPTED
    return code


def _preempted(client: Any, lease_id: str, code: int) -> str | None:
    """Why the lease was preempted (with its checkpoint), or None if it was not."""
    from gpuallocd.cli.leasing.preempted import outcome_of

    outcome = outcome_of(client, lease_id, code)
    if not outcome.preempted:
        return None
    checkpoint = escape_unprintable(outcome.checkpoint) if outcome.checkpoint else "none"
    return f"{outcome.detail}; checkpoint: {checkpoint}"
