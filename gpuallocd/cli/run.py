"""`gpuallocctl run`: lease GPUs for one command, and give them back when it ends.

The lease covers the command and every process it starts: `run` makes itself their
subreaper (PR_SET_CHILD_SUBREAPER), so an orphaned process of the command comes back to it,
and it waits for all of them before it frees the lease. The daemon follows the same tree
through /proc, so a `kill -9` of `run` leaves the command its lease. A revoke stops the
command (the lease asks for `on_revoke: "terminate"`); `run` then prints why and exits 6.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Any

import click

from gpuallocd.cli.common import lease_request_options
from gpuallocd.cli.errors import EXIT_REVOKED
from gpuallocd.cli.output import escape_unprintable

__all__ = ["COMMANDS", "FORWARDED_SIGNALS"]

# SIGINT is not forwarded: a Ctrl-C at the terminal reaches the command directly (it shares
# our process group), and forwarding it too would interrupt it twice. It is ignored here
# while the command runs, so the lease is freed after the command has handled it.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
PR_SET_CHILD_SUBREAPER = 36
MAX_LABEL = 200


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
        click.echo(f"gpuallocctl: command not found: {command[0]}", err=True)
        return 127
    except PermissionError:
        click.echo(f"gpuallocctl: permission denied: {command[0]}", err=True)
        return 126
    with _forward_signals(child):
        if started is not None:
            started()
        code = child.wait()
        _reap_the_rest()
    return 128 - code if code < 0 else code


def _revocation(client: Any, lease_id: str) -> str | None:
    """Why the lease was revoked (the reason given, or 'no reason given'); None if it was not."""
    with contextlib.suppress(Exception):
        if client.lease(lease_id).state != "revoked":
            return None
        events = [e for e in client.history(lease_id) if e["event"] == "revoked"]
        return (events[-1]["detail"] if events else None) or "no reason given"
    return None


def _announce_command(client: Any, lease_id: str, ttl: float | None) -> None:
    """A renewal makes the daemon look for the command's processes at once."""
    with contextlib.suppress(Exception):
        client.renew(lease_id, ttl)


@click.command(context_settings={"allow_interspersed_args": False})
@lease_request_options(
    ttl_help="Lease lifetime between renewals, in seconds.",
    label_help="A note shown in `leases` (default: the command).",
)
@click.option(
    "--visible",
    type=click.Choice(["uuid", "index"]),
    default="uuid",
    show_default=True,
    help="How CUDA_VISIBLE_DEVICES names the GPUs.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(
    ctx: click.Context,
    count: int | None,
    gpus: tuple[str, ...],
    policy: str | None,
    ttl: float | None,
    label: str | None,
    wait: bool,
    timeout: float | None,
    visible: str,
    command: tuple[str, ...],
) -> None:
    """Lease GPUs, run COMMAND with CUDA_VISIBLE_DEVICES set, free them when it exits.

    Exits with the command's exit code; 6 if root revoked the lease (the command is stopped:
    SIGTERM, then SIGKILL). Example: gpuallocctl run -n 2 -- python train.py
    """
    from gpulease import Client, gpu_lease

    if count is None and not gpus:
        count = 1
    lease = gpu_lease(
        count or 1,
        gpus=list(gpus) or None,
        policy=policy,
        ttl=ttl,
        wait=wait,
        timeout=timeout,
        label=label or escape_unprintable(" ".join(command))[:MAX_LABEL],
        socket=ctx.obj.socket,
        visible=visible,
        on_revoke="terminate",
    )
    with lease as granted, Client(ctx.obj.socket) as client:
        if not ctx.obj.json:
            gpu_list = ",".join(str(g.index) for g in granted.gpus)
            click.echo(f"gpuallocctl: lease {granted.id}: GPU {gpu_list}", err=True)
        code = run_command(command, started=lambda: _announce_command(client, granted.id, ttl))
        reason = _revocation(client, granted.id)
    if reason is not None:
        click.echo(
            f"gpuallocctl: lease {granted.id} was revoked ({reason}); the command was stopped",
            err=True,
        )
        sys.exit(EXIT_REVOKED)
    sys.exit(code)


COMMANDS = (run,)
