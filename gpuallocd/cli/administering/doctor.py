"""`gpuallocctl doctor`: check the box the way an admin would, one line per check."""

from __future__ import annotations

from typing import Any

import click

from gpuallocd.cli.administering.doctor_checks import (
    FAIL,
    OK,
    WARN,
    Check,
    daemon_checks,
    daemon_reachable,
)
from gpuallocd.cli.administering.doctor_checks import host_checks as local_checks
from gpuallocd.cli.errors import EXIT_ERROR
from gpuallocd.cli.output import echo_json
from gpuallocd.cli.style import colour_enabled
from gpuallocd.cli.text import escape_unprintable

__all__ = ["COMMANDS"]

COLOURS = {OK: "green", WARN: "yellow", FAIL: "red"}


def _ask_daemon(socket: str | None) -> tuple[str, Any, Any, list[str], str | None]:
    """The socket asked, the daemon's health, diagnostics and GPU UUIDs (None and the error
    where it does not answer)."""
    from gpulease import Client, GpuallocError

    client = Client(socket)
    try:
        with client:
            health = client.health()
            diag = client.diagnostics()
            uuids = [str(gpu["uuid"]) for gpu in client.topology()["gpus"]]
            return client.socket_path, health, diag, uuids, None
    except GpuallocError as exc:
        return client.socket_path, None, None, [], exc.message


def run_checks(socket: str | None) -> list[Check]:
    path, health, diag, uuids, error = _ask_daemon(socket)
    checks = [daemon_reachable(health, error, path)]
    if diag is not None:
        checks += daemon_checks(diag)
    return checks + local_checks(path, diag, uuids)


NAME_WIDTH = 17


def _line(check: Check, colour: bool, name_width: int = NAME_WIDTH) -> str:
    """`warn  socket            message`, and under the message, where it starts, `fix: ...`."""
    status = f"{check.status:<5}"
    if colour:
        status = click.style(status, fg=COLOURS[check.status], bold=check.status == FAIL)
    text = f"{status} {check.name:<{name_width}} {escape_unprintable(check.message)}"
    if check.fix and check.status != OK:
        indent = " " * (5 + 1 + name_width + 1)  # the status, the name, and their spaces
        text += f"\n{indent}fix: {escape_unprintable(check.fix)}"
    return text


@click.command(short_help="Check this box as an admin would, with the fix for each")
@click.pass_context
def doctor(ctx: click.Context) -> None:
    """Check this box as an admin would: the daemon and its version, its capabilities against
    what its config needs, process tracking, systemd and the watchdog, config warnings, the
    socket's permissions, NVML and its GPUs (against nvidia-smi -L), device files, cgroups
    and the clock. One line each: ok, warn or fail with the fix; exits 1 if a check fails."""
    checks = run_checks(ctx.obj.socket)
    failed = sum(check.status == FAIL for check in checks)
    if ctx.obj.json:
        warned = sum(check.status == WARN for check in checks)
        echo_json({"checks": [c.to_json() for c in checks], "failed": failed, "warned": warned})
    else:
        colour = colour_enabled()
        width = max([NAME_WIDTH, *(len(check.name) for check in checks)])
        for check in checks:
            click.echo(_line(check, colour, width))
    if failed:
        ctx.exit(EXIT_ERROR)


COMMANDS = (doctor,)
