"""`gpuallocctl run`: lease GPUs for one command, and give them back when it ends.

The lease covers the command and every process it starts: `run` makes itself their
subreaper (PR_SET_CHILD_SUBREAPER), so an orphaned process of the command comes back to it,
and it waits for all of them before it frees the lease. The daemon follows the same tree
through /proc, so a `kill -9` of `run` leaves the command its lease. A revoke stops the
command: `run` hears it at once (`revoke_watch.py`) and stops its command itself, and the
daemon stops the lease's processes too (the lease asks for `on_revoke: "terminate"`), which
also covers a command whose `run` is gone; `run` then prints why and exits 7.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from types import FrameType
from typing import Any

import click

from gpuallocd.cli.common import (
    check_visible,
    lease_request_options,
    preemption_arguments,
    preemption_options,
)
from gpuallocd.cli.errors import EXIT_PREEMPTED, EXIT_REVOKED
from gpuallocd.cli.quick_exit import Finished
from gpuallocd.cli.text import escape_unprintable
from gpuallocd.model.power import cap_text

__all__ = ["COMMANDS", "FORWARDED_SIGNALS", "run_leased"]

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


def _print_notice(event: dict[str, Any]) -> None:
    """An event of the lease meant for its holder, as one line on stderr."""
    detail = escape_unprintable(str(event.get("detail") or ""))
    click.echo(f"gpuallocctl: lease {event['lease_id']}: {event['event']}: {detail}", err=True)


_visible_option = click.option(
    "--visible",
    type=click.Choice(["uuid", "index"]),
    default="uuid",
    show_default=True,
    help="How CUDA_VISIBLE_DEVICES names the GPUs.",
)

_nested_option = click.option(
    "--nested",
    type=click.Choice(["reuse", "new"]),
    default="reuse",
    show_default=True,
    help="Inside a lease (GPUALLOCD_LEASE_ID, as under another run): use it, or take a new one.",
)


def _queue_display(ctx: click.Context, wait: bool) -> AbstractContextManager[None]:
    """With --wait, the waiting line and Ctrl-C's leaving of the queue (`waiting.py`, loaded
    only then); without, nothing."""
    if not wait:
        return contextlib.nullcontext()
    from gpuallocd.cli.leasing.waiting import queued

    return queued(ctx, wait)


def run_leased(
    ctx: click.Context,
    command: Sequence[str],
    request: dict[str, Any],
    granted_to: Any = None,
) -> int:
    """Lease as `request` says (gpu_lease's arguments), run `command` under it, free it;
    `granted_to(lease_id)` is told of the grant (`run --requeue`'s supervisor).

    While queued, the waiting line shows on stderr and Ctrl-C leaves the queue (exit 130).
    """
    if not request.get("preemptible"):
        return _run_leased(ctx, command, request, granted_to, None)
    from gpuallocd.cli.leasing.preempted import preempt_file

    with preempt_file() as write:
        return _run_leased(ctx, command, request, granted_to, write)


def _run_leased(
    ctx: click.Context,
    command: Sequence[str],
    request: dict[str, Any],
    granted_to: Any,
    write_preempt_file: Any,
) -> int:
    from gpulease import Client, gpu_lease
    from gpulease.renewer import idle_message

    from gpuallocd.cli.leasing.revoke_watch import RevokeWatch

    check_visible(request.get("mig"), request.get("visible", "uuid"))
    request = dict(request)
    count, gpus = request.pop("count"), request.pop("gpus")
    if count is None and not gpus:
        count = 1
    lease = gpu_lease(
        count or 1,
        gpus=list(gpus) or None,
        socket=ctx.obj.socket,
        on_idle=lambda lease, idle: click.echo(
            f"gpuallocctl: {idle_message(lease, idle)}", err=True
        ),
        on_revoke="terminate",
        raise_preempt_signal=False,  # the command gets it from the daemon; `run` holds
        **request,
    )
    with contextlib.ExitStack() as stack:
        with _queue_display(ctx, bool(request.get("wait"))):
            granted = stack.enter_context(lease)
        if granted_to is not None:
            granted_to(granted.id)
        client = lease.client  # the lease's own connection: no second connect and check
        if not ctx.obj.json:
            gpu_list = ",".join(g.uuid if g.kind == "mig" else str(g.index) for g in granted.gpus)
            click.echo(f"gpuallocctl: lease {granted.id}: GPU {gpu_list}", err=True)
            capped = cap_text(granted.raw)
            if capped:
                click.echo(f"gpuallocctl: lease {granted.id}: {capped}", err=True)
        ttl = request.get("ttl")
        watch = RevokeWatch(
            lambda: Client(ctx.obj.socket),
            granted.id,
            _print_notice,
            on_preempt=write_preempt_file or (lambda preemption: None),
        )

        def started() -> None:
            if not lease.nested:  # the enclosing lease's TTL is its holder's to set
                _announce_command(client, granted.id, ttl)
            watch.start()

        code = run_command(command, started=started)
        watch.command_ended.set()
        reason = _revocation(client, granted.id)
        preempted = _preempted(client, granted.id, code) if request.get("preemptible") else None
    if reason is not None:
        click.echo(
            f"gpuallocctl: lease {granted.id} was revoked ({reason}); the command was stopped",
            err=True,
        )
        return EXIT_REVOKED
    if preempted is not None:
        if granted_to is None:  # with --requeue its supervisor says it, and what follows
            click.echo(f"gpuallocctl: lease {granted.id} was preempted: {preempted}", err=True)
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


@click.command(
    context_settings={"allow_interspersed_args": False},
    short_help="Lease GPUs, run COMMAND on them, free them when it exits",
)
@lease_request_options(
    ttl_help="Lease lifetime between renewals: 10m, 1h or seconds.",
    label_help="A note shown in `leases` (default: the command).",
)
@_visible_option
@_nested_option
@preemption_options(requeue=True)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(ctx: click.Context, /, command: tuple[str, ...], label: str | None, **request: Any) -> None:
    """Lease GPUs, run COMMAND with CUDA_VISIBLE_DEVICES set, free them when it exits.

    Exits with the command's exit code; 7 if an admin revoked the lease (the command is
    stopped: SIGTERM, then SIGKILL); 8 if it was preempted (without --requeue).
    Example: gpuallocctl run -n 2 -- python train.py
    """
    request["label"] = label or escape_unprintable(" ".join(command))[:MAX_LABEL]
    requeue = bool(request.pop("requeue"))
    arguments = {**preemption_arguments(request, requeue=requeue), **_gpu_lease_arguments(request)}
    if not requeue:
        raise Finished(run_leased(ctx, command, arguments))
    from gpulease import Client

    from gpuallocd.cli.leasing.preempted import run_requeued

    def attempt(request: dict[str, Any], granted_to: Any) -> int:
        return run_leased(ctx, command, request, granted_to)

    raise Finished(run_requeued(lambda: Client(ctx.obj.socket), attempt, arguments))


def _gpu_lease_arguments(options: dict[str, Any]) -> dict[str, Any]:
    """The command's options under gpu_lease's names."""
    arguments = dict(options)
    arguments["min_free_memory_bytes"] = arguments.pop("min_free_memory")
    return arguments


@click.command(name="shell", short_help="Open your shell under a lease; exit it to free the lease")
@lease_request_options(
    ttl_help="Lease lifetime between renewals: 10m, 1h or seconds.",
    label_help="A note shown in `leases` (default: shell).",
)
@_visible_option
@_nested_option
@click.pass_context
def shell(ctx: click.Context, /, label: str | None, **request: Any) -> None:
    """Open your shell ($SHELL) under a lease, as salloc does; exit the shell to free it.

    Example: gpuallocctl shell -n 2 --wait
    """
    login_shell = os.environ.get("SHELL") or "/bin/sh"
    request["label"] = label or "shell"
    raise Finished(run_leased(ctx, [login_shell], _gpu_lease_arguments(request)))


COMMANDS = (run, shell)
