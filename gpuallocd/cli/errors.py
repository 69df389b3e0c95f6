"""The one place where `gpuallocctl` turns an error into a message and an exit code.

Errors come from two trees with the same codes: the daemon's answers through the client
(`gpulease.errors`) and what the command line does on its own (`gpuallocd.errors`: topology
files, traces, policies run offline). Each prints as one line, `MESSAGE [code]`, never a
traceback, and exits with the code of its kind (docs/cli.md, Exit codes).
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from gpuallocd.cli.exit_codes import (
    EXIT_CAPACITY,
    EXIT_ERROR,
    EXIT_NO_DAEMON,
    EXIT_PERMISSION,
    EXIT_PREEMPTED,
    EXIT_QUOTA,
    EXIT_REVOKED,
    EXIT_USAGE,
)

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
    "exit_as_a_command",
    "refusal_exit_code",
]

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


def exit_as_a_command(exc: BaseException) -> NoReturn:
    """Exit as `gpuallocctl` exits when one of its commands raises `exc`.

    For `run` read without click (`leasing/quick_run.py`): the exception goes through the
    same group and click's standalone mode as any command's, so both ways print the same
    line and exit with the same code (a project error as `as_cli_error` says, Ctrl-C as
    `Aborted!`, anything else as a traceback).
    """

    def raise_it() -> None:
        raise exc

    group = GuardedGroup(name="gpuallocctl", commands=[click.Command("run", callback=raise_it)])
    group.main(["run"], prog_name="gpuallocctl", standalone_mode=True)
    raise AssertionError("click's standalone mode always exits")  # pragma: no cover
