"""`gpuallocd`, the command: options from the settings table, errors to exit codes.

This is the only place the daemon turns an error into an exit code (docs/configuration.md,
Exit codes): each StartupError carries its own; anything else unexpected is 1, with its
traceback in the log.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from gpuallocd import __version__
from gpuallocd.daemon.config.loading import load_config, parse_text
from gpuallocd.daemon.config.settings import (
    DaemonConfig,
    Setting,
    render_markdown,
    render_toml,
    settings,
)
from gpuallocd.daemon.eventloop import run_event_loop
from gpuallocd.daemon.hints import hint_for
from gpuallocd.daemon.lifecycle import Daemon
from gpuallocd.daemon.logformat import LOG_FORMAT, EscapingFormatter
from gpuallocd.errors import ConfigError, GpuallocError, StartupError

__all__ = ["EXIT_UNEXPECTED", "main"]

log = logging.getLogger("gpuallocd")

EXIT_UNEXPECTED = 1
F = TypeVar("F", bound=Callable[..., Any])


def _type_name(setting: Setting) -> str:
    return "LIST" if setting.type is tuple else setting.type.__name__.upper()


def _option_for(setting: Setting) -> Callable[[F], F]:
    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        try:
            return parse_text(setting, value, f"option {setting.option}")
        except ConfigError as exc:
            raise click.BadParameter(exc.message) from None

    metavar = "|".join(setting.choices) if setting.choices else _type_name(setting)
    return click.option(
        setting.option,
        setting.name,
        callback=convert,
        metavar=metavar,
        help=f"{setting.meaning.replace('`', '')} [env {setting.env}]",
    )


def _setting_options(command: F) -> F:
    for setting in reversed(settings()):
        command = _option_for(setting)(command)
    return command


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(EscapingFormatter(LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
    # The format shows neither the caller's frame, thread nor process: the logging HOWTO's
    # optimisations, so a record (one per grant and free) does not collect them.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def _print_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    click.echo(render_toml() if value == "toml" else render_markdown(), nl=False)
    ctx.exit(0)


def exit_code_for(exc: BaseException) -> int:
    """The documented exit code for an error that stopped the daemon."""
    if isinstance(exc, StartupError):
        return exc.exit_code
    return EXIT_UNEXPECTED


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML config file.",
)
@click.option(
    "--print-config",
    type=click.Choice(["toml", "markdown"]),
    callback=_print_config,
    expose_value=False,
    is_eager=True,
    help="Print every setting as an example config file (toml) or a table (markdown), and exit.",
)
@click.option(
    "--init",
    "initialise",
    is_flag=True,
    help="Create a new, empty ledger if the state directory has none (an empty one is set "
    "aside); an existing ledger is used as it is. Without it, a missing or empty ledger "
    "stops the daemon (exit 73).",
)
@click.option(
    "--recover",
    is_flag=True,
    help="Rebuild a damaged ledger (the daemon stopped): salvage what SQLite reads, else the "
    "newest good backup, then the leases the machine proves; the damaged files are kept. "
    "Prints what was lost, then exits (docs/recovery.md).",
)
@_setting_options
@click.version_option(__version__, prog_name="gpuallocd")
def main(config_file: Path | None, initialise: bool, recover: bool, **options: Any) -> None:
    """Run the GPU allocation daemon in the foreground."""
    config: DaemonConfig | None = None
    try:
        notes: list[str] = []
        config = load_config(config_file, notes=notes, **options)
        _configure_logging(config.log_level)
        for note in notes:
            log.warning("%s", note)
        if recover:
            from gpuallocd.daemon.ledger_care.recovery import recover as rebuild_ledger

            rebuild_ledger(config)
            return
        reload = functools.partial(load_config, config_file, **options)  # on SIGHUP
        run_event_loop(Daemon(config, reload_config=reload, initialise=initialise).run())
    except GpuallocError as exc:
        log.debug("startup failed", exc_info=exc)
        click.echo(f"gpuallocd: {exc.message}", err=True)
        hint = hint_for(exc, config)
        if hint is not None:
            click.echo(f"gpuallocd: {hint}", err=True)
        sys.exit(exit_code_for(exc))
    except OSError as exc:  # a file the daemon needs, outside the paths translated above
        click.echo(f"gpuallocd: {exc}", err=True)
        sys.exit(EXIT_UNEXPECTED)
