"""`gpuallocctl run`: lease GPUs for one command, and give them back when it ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from types import FrameType

import click

from gpuallocd.cli.common import lease_request_options

__all__ = ["COMMANDS", "FORWARDED_SIGNALS"]

# SIGINT is not forwarded: a Ctrl-C at the terminal reaches the command directly (it shares
# our process group), and forwarding it too would interrupt it twice. It is ignored here
# while the command runs, so the lease is freed after the command has handled it.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


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


def run_command(command: Sequence[str]) -> int:
    """Run `command` with our environment, forwarding signals; its exit code (128+N if killed)."""
    try:
        child = subprocess.Popen(list(command), env=dict(os.environ))
    except FileNotFoundError:
        click.echo(f"gpuallocctl: command not found: {command[0]}", err=True)
        return 127
    except PermissionError:
        click.echo(f"gpuallocctl: permission denied: {command[0]}", err=True)
        return 126
    with _forward_signals(child):
        code = child.wait()
    return 128 - code if code < 0 else code


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

    Exits with the command's exit code. Example: gpuallocctl run -n 2 -- python train.py
    """
    from gpulease import gpu_lease
    from gpulease.renewer import idle_message

    if count is None and not gpus:
        count = 1
    lease = gpu_lease(
        count or 1,
        gpus=list(gpus) or None,
        policy=policy,
        ttl=ttl,
        wait=wait,
        timeout=timeout,
        label=label or " ".join(command)[:200],
        socket=ctx.obj.socket,
        visible=visible,
        on_idle=lambda lease, idle: click.echo(
            f"gpuallocctl: {idle_message(lease, idle)}", err=True
        ),
    )
    with lease as granted:
        if not ctx.obj.json:
            gpu_list = ",".join(str(g.index) for g in granted.gpus)
            click.echo(f"gpuallocctl: lease {granted.id}: GPU {gpu_list}", err=True)
        code = run_command(command)
    sys.exit(code)


COMMANDS = (run,)
