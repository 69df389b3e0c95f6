"""The docs cover what exists: every command, every error code, every setting."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import click
import gpulease.errors
import pytest

from gpuallocd import errors
from gpuallocd.cli import cli
from gpuallocd.cli import errors as cli_errors
from gpuallocd.cli.lazy import all_commands
from gpuallocd.daemon.config.loading import load_config
from gpuallocd.daemon.config.settings import (
    DaemonConfig,
    render_markdown,
    render_toml,
    sections,
    settings,
)

DOCS = Path(__file__).resolve().parent.parent / "docs"


COMMANDS = all_commands(cli)


def all_docs() -> str:
    return "\n".join(p.read_text() for p in sorted(DOCS.glob("*.md")))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_cli_command_has_help_and_docs(name: str) -> None:
    """Each gpuallocctl command has a help text and appears in docs/ as `name ...`."""
    command = COMMANDS[name]
    assert command.help and command.help.strip()
    assert re.search(rf"`{re.escape(name)}( |`)", all_docs()), f"{name} is not documented"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_cli_option_is_documented(name: str) -> None:
    """Each option of each command appears in docs/ (as --flag)."""
    text = all_docs()
    for param in COMMANDS[name].params:
        if isinstance(param, click.Option):
            longest = max(param.opts, key=len)
            if longest.startswith("--") and longest not in ("--help",):
                assert longest in text, f"{name} {longest} is not documented"


def test_every_error_code_is_in_the_api_doc() -> None:
    """docs/api.md lists every server and client error code."""
    api = (DOCS / "api.md").read_text()
    codes = set(errors.error_classes()) | set(gpulease.errors.ERROR_CLASSES)
    missing = sorted(code for code in codes if f"`{code}`" not in api)
    assert missing == []


def test_every_setting_is_in_the_configuration_doc() -> None:
    """docs/configuration.md documents every config key."""
    text = (DOCS / "configuration.md").read_text()
    missing = [f.name for f in dataclasses.fields(DaemonConfig) if f"`{f.name}`" not in text]
    assert missing == []


def test_example_config_file_lists_every_setting() -> None:
    """systemd/gpuallocd.toml names every setting (commented out or set)."""
    text = (DOCS.parent / "systemd" / "gpuallocd.toml").read_text()
    names = [setting.name for setting in settings()] + list(sections())
    missing = [name for name in names if name not in text]
    assert missing == []


def test_the_settings_table_in_the_docs_is_generated_from_the_code() -> None:
    """docs/configuration.md holds exactly the table the settings declare."""
    text = (DOCS / "configuration.md").read_text()
    assert render_markdown() in text


def test_the_example_config_file_is_generated_from_the_code() -> None:
    """systemd/gpuallocd.toml is what `gpuallocd --print-config toml` prints, and it loads."""
    path = DOCS.parent / "systemd" / "gpuallocd.toml"
    assert path.read_text() == render_toml()
    assert load_config(path, environ={}) == DaemonConfig()


def test_every_daemon_exit_code_is_documented() -> None:
    """docs/configuration.md gives each startup error's exit code."""
    text = (DOCS / "configuration.md").read_text()
    for cls in (errors.ConfigError, errors.AlreadyRunning, errors.HardwareUnavailable):
        assert f"| {cls.exit_code} | `{cls.__name__}` |" in text
    assert f"| {errors.StateUnusable.exit_code} | `StateUnusable` |" in text


def test_every_cli_exit_code_is_documented() -> None:
    """docs/cli.md gives each exit code gpuallocctl uses."""
    text = (DOCS / "cli.md").read_text()
    for name in cli_errors.__all__:
        if name.startswith("EXIT_"):
            assert f"| {getattr(cli_errors, name)} |" in text, name


def test_every_image_in_the_docs_exists_and_is_small() -> None:
    """Each picture a page shows (`![...](file)`) is in docs/ and under 300 KB."""
    shown = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", all_docs())
    assert "dashboard.png" in shown
    for name in shown:
        path = DOCS / name
        assert path.is_file(), name
        assert path.stat().st_size < 300 * 1024, name


def test_every_page_is_listed_in_the_readme() -> None:
    """The README's list of docs names every page of docs/."""
    readme = (DOCS.parent / "README.md").read_text()
    assert [p.name for p in sorted(DOCS.glob("*.md")) if f"docs/{p.name}" not in readme] == []
