"""The one place where `gpuallocctl` turns an error into a message and an exit code.

Errors come from two trees with the same codes: the daemon's answers through the client
(`gpulease.errors`) and what the command line does on its own (`gpuallocd.errors`: topology
files, traces, policies run offline). Each prints as one line, `MESSAGE [code]`, never a
traceback, and exits with the code of its kind (docs/cli.md, Exit codes).
"""

from __future__ import annotations

import sys
from typing import Any

import click

__all__ = [
    "EXIT_CAPACITY",
    "EXIT_ERROR",
    "EXIT_NO_DAEMON",
    "EXIT_PERMISSION",
    "EXIT_PREEMPTED",
    "EXIT_QUOTA",
    "EXIT_REVOKED",
    "EXIT_USAGE",
    "CliError",
    "GuardedGroup",
    "as_cli_error",
    "refusal_exit_code",
]

EXIT_ERROR = 1  # any other error
EXIT_USAGE = 2  # the request or the command line is wrong (click uses 2 for its own too)
EXIT_NO_DAEMON = 3  # no daemon answers on the socket
EXIT_CAPACITY = 4  # nothing fits now: GPUs unavailable or busy; the same call may work later
EXIT_PERMISSION = 5  # not yours, or root's (or an admin's) to do
EXIT_QUOTA = 6  # over one of the caller's limits: not now, and not by waiting
EXIT_REVOKED = 7  # `run`: an admin revoked the lease and its command was stopped
EXIT_PREEMPTED = 8  # `run`: the lease was preempted (docs/preemption.md), without --requeue

_EXIT_BY_CODE = {
    "daemon_unavailable": EXIT_NO_DAEMON,
    "gpus_unavailable": EXIT_CAPACITY,
    "gpu_busy": EXIT_CAPACITY,
    "reservation_conflict": EXIT_CAPACITY,
    "permission_denied": EXIT_PERMISSION,
    "quota_exceeded": EXIT_QUOTA,
}


NO_DAEMON_HINT = (
    "start one: `sudo systemctl start gpuallocd` (the service, README), or to try it without "
    "GPUs: `gpuallocd --inventory example:workstation-4gpu-nvbridge "
    "--socket /tmp/gpuallocd-$USER/gpuallocd.sock --state-dir /tmp/gpuallocd-$USER/state` "
    "and `export GPUALLOCD_SOCKET=/tmp/gpuallocd-$USER/gpuallocd.sock`"
)


def _hint(code: str, exc: BaseException) -> str:
    """A second line that says the fix, for the errors people meet first (a user kept out
    of a running daemon's socket has the fix in the message: starting one is not it)."""
    if code != "daemon_unavailable" or getattr(exc, "denied", False):
        return ""
    return f"\n{NO_DAEMON_HINT}"


class CliError(click.ClickException):
    """A one-line error with its own exit code (click's ClassVar, set per instance)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        vars(self)["exit_code"] = exit_code


def _client_error_class() -> type[Exception] | None:
    module = sys.modules.get("gpulease.errors")  # not loaded: no client error can exist
    found: type[Exception] | None = getattr(module, "GpuallocError", None)
    return found


def _exit_code(code: str, caller_error: bool) -> int:
    if code in _EXIT_BY_CODE:
        return _EXIT_BY_CODE[code]
    return EXIT_USAGE if caller_error else EXIT_ERROR


def refusal_exit_code(refusal: dict[str, Any]) -> int:
    """The exit code of the command whose request the daemon would refuse so (a preview's
    `refusal`): the one the refused request itself exits with."""
    return _exit_code(str(refusal["code"]), 400 <= int(refusal.get("status", 500)) < 500)


def as_cli_error(exc: BaseException) -> CliError | None:
    """The CLI error for a project error of either tree; None for anything else."""
    return _local_cli_error(exc) or _client_cli_error(exc)


def _local_cli_error(exc: BaseException) -> CliError | None:
    """The CLI error for an error of the local tree (`gpuallocd.errors`); None otherwise."""
    if "gpuallocd.errors" not in sys.modules:
        return None  # not loaded, so no local error exists: `run` never pays for importing it
    from gpuallocd import errors as local

    if isinstance(exc, local.LocalError):
        kind = EXIT_USAGE if isinstance(exc, local.InputFileError) else EXIT_ERROR
        return CliError(exc.message, kind)
    if isinstance(exc, local.GpuallocError):
        return CliError(
            f"{exc.message} [{exc.code}]",
            _exit_code(exc.code, isinstance(exc, local.CallerError)),
        )
    return None


def _client_cli_error(exc: BaseException) -> CliError | None:
    """The CLI error for an error of the client's tree (`gpulease.errors`); None otherwise."""
    client_error = _client_error_class()
    if client_error is not None and isinstance(exc, client_error):
        code: str = getattr(exc, "code", "internal_error")
        message: str = getattr(exc, "message", str(exc))
        caller = any(base.__name__ == "CallerError" for base in type(exc).__mro__)
        return CliError(f"{message} [{code}]{_hint(code, exc)}", _exit_code(code, caller))
    return None


class GuardedGroup(click.Group):
    """A click group whose commands' project errors become one-line CLI errors."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            mapped = as_cli_error(exc)
            if mapped is None:
                raise
            raise mapped from None
