"""`gpuallocctl run`: lease GPUs for one command, and give them back when it ends."""

from __future__ import annotations

import sys

import click

from gpuallocd.cli.common import lease_request_options
from gpuallocd.cli.runner import FORWARDED_SIGNALS, RunRequest, lease_and_run, run_command

__all__ = ["COMMANDS", "FORWARDED_SIGNALS", "run_command"]


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
    request = RunRequest(
        command=command,
        count=count,
        gpus=gpus,
        policy=policy,
        ttl=ttl,
        label=label,
        wait=wait,
        timeout=timeout,
        visible=visible,
    )
    sys.exit(lease_and_run(request, ctx.obj.socket, announce=not ctx.obj.json))


COMMANDS = (run,)
