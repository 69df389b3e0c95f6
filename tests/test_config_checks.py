"""Config mistakes that used to pass silently: names the machine does not know, a refused
reload, an octal mode written the shell's way, a misspelt key, a limit outside `[limits]`,
a negative price, watts written with their unit."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuallocd.daemon.config.loading import load_config
from gpuallocd.errors import ConfigError
from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.test_doctor import doctor

STRANGERS = """
admin_groups = ["ga-nosuch-admins", "root"]

[limits.group.ga-nosuch-group]
max_gpus = 1

[limits.user.ga-nosuch-user]
max_gpus = 1

[limits.user.root]
max_gpus = 8
"""


@pytest.fixture
def strangers(paths: DaemonPaths) -> Iterator[ProcessDaemon]:
    """A real daemon whose config names a group and a user this machine lacks."""
    daemon = ProcessDaemon(paths, default_policy="simple")
    with open(daemon.config_file, "a") as config:
        config.write(STRANGERS)
    daemon.start()
    yield daemon
    if daemon.process is not None and daemon.process.poll() is None:
        daemon.kill()


def test_names_the_machine_lacks_are_warned_at_start_by_health_and_doctor(
    strangers: ProcessDaemon,
) -> None:
    """admin_groups, [limits.group.X] and [limits.user.Y] naming nobody: one warning each in
    the start-up log, /v1/health and doctor (which no longer says "no warnings")."""
    expected = [
        "admin_groups names group 'ga-nosuch-admins', which this machine does not have",
        "[limits.group.ga-nosuch-group]: this machine has no group 'ga-nosuch-group'",
        "[limits.user.ga-nosuch-user]: this machine has no user 'ga-nosuch-user'",
    ]
    with strangers.client() as client:
        warnings = client.health()["config_warnings"]
    for text in expected:
        assert sum(text in w for w in warnings) == 1, warnings
        assert text in strangers.stderr()
    assert not any("root" in w for w in warnings)
    checked = doctor(strangers.paths.socket)
    assert "no warnings" not in checked.stdout
    assert all(f"warn  config            {text}" in checked.stdout for text in expected)


def test_a_refused_reload_is_shown_by_health_and_doctor_until_one_reads(
    strangers: ProcessDaemon,
) -> None:
    """A file that no longer reads at SIGHUP: the rules in force stay, /v1/health says the
    reload was refused and why, doctor fails on it; a reload that reads clears it and brings
    the new file's warnings."""
    good = strangers.config_file.read_text()
    strangers.config_file.write_text("default_ttl = 3600\n" + good)
    strangers.signal(signal.SIGHUP)
    with strangers.client() as client:
        wait_for(lambda: client.health()["reload_refused"] is not None, 30, what="the refusal")
        refused = client.health()["reload_refused"]
        assert "unknown setting 'default_ttl'" in refused["message"] and refused["at"] > 0
        checked = doctor(strangers.paths.socket)
        assert "fail  config            the last reload was refused" in checked.stdout
        assert checked.returncode != 0
        strangers.config_file.write_text(good.replace("ga-nosuch-admins", "root"))
        strangers.signal(signal.SIGHUP)
        wait_for(lambda: client.health()["reload_refused"] is None, 30, what="the reload")
        warnings = client.health()["config_warnings"]
    assert not any("admin_groups" in w for w in warnings) and len(warnings) == 2


@pytest.mark.parametrize(
    ("line", "hint"),
    [
        (
            "default_ttl = 3600",
            "unknown setting 'default_ttl'; did you mean 'default_ttl_seconds'?",
        ),
        ("socket_mod = 0o660", "did you mean 'socket_mode'?"),
        ("socket_mode = 0660", 'write socket_mode = 0o660 (TOML\'s octal) or "0660"'),
        ("socket_mode = 660", 'socket_mode = 660 is decimal (0o1224): write 0o660 or "0660"'),
    ],
)
def test_common_config_typos_get_a_hint(tmp_path: Path, line: str, hint: str) -> None:
    """A misspelt key names the nearest one; an octal mode written as in a shell says how
    TOML spells it."""
    file = tmp_path / "c.toml"
    file.write_text(f'log_level = "INFO"\n{line}\n')
    with pytest.raises(ConfigError) as refused:
        load_config(file, environ={})
    assert hint in refused.value.message


@pytest.mark.parametrize("written", ['"0660"', '"0o660"', "0o660", "432"])
def test_an_octal_mode_reads_as_toml_octal_or_a_quoted_string(tmp_path: Path, written: str) -> None:
    """socket_mode = 0o660, "0660" and "0o660" all mean rw for owner and group."""
    file = tmp_path / "c.toml"
    file.write_text(f"socket_mode = {written}\n")
    assert load_config(file, environ={}).socket_mode == 0o660


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            "max_kwh_per_day = 0.05",
            "max_kwh_per_day is a limit: it belongs in the [limits] table (for everyone), or "
            "in [limits.group.NAME] or [limits.user.NAME]",
        ),
        ("max_gpus = 2", "max_gpus is a limit: it belongs in the [limits] table"),
        ("energy_price_per_kwh = -1", "energy_price_per_kwh must be at least 0, not -1"),
        ("energy_price_per_kwh = -0.01", "energy_price_per_kwh must be at least 0"),
        ("lease_power_limit_watts = -250", "lease_power_limit_watts must be at least 1"),
        (
            'power_budget_watts = "1600 watts"',
            'power_budget_watts must be a number of watts, e.g. 1600 or "1600W", '
            "not '1600 watts'",
        ),
        ("power_budget_watts = true", "power_budget_watts must be a number of watts"),
        ('energy_interval_seconds = "1m"', "energy_interval_seconds must be a number"),
    ],
)
def test_a_slip_in_the_energy_and_power_keys_says_what_is_expected(
    tmp_path: Path, line: str, said: str
) -> None:
    """A limit at the top level says where limits go; a negative price or cap is refused;
    a wrong power figure says that it is a number of watts."""
    file = tmp_path / "c.toml"
    file.write_text(f"{line}\n")
    with pytest.raises(ConfigError) as refused:
        load_config(file, environ={})
    assert said in refused.value.message


@pytest.mark.parametrize("written", ['"1600W"', '"1600 W"', '"1600w"', "1600", "1600.0"])
def test_a_power_budget_reads_with_or_without_its_unit(tmp_path: Path, written: str) -> None:
    """`power_budget_watts = "1600W"` reads as the command line's `--power-limit 1600W`."""
    file = tmp_path / "c.toml"
    file.write_text(f"power_budget_watts = {written}\n")
    assert load_config(file, environ={}).power_budget_watts == 1600.0


def test_watts_with_their_unit_read_from_the_environment_too() -> None:
    """GPUALLOCD_LEASE_POWER_LIMIT_WATTS=250W is 250 W; a price of 0 is a price (free)."""
    config = load_config(
        environ={"GPUALLOCD_LEASE_POWER_LIMIT_WATTS": "250W", "GPUALLOCD_ENERGY_PRICE_PER_KWH": "0"}
    )
    assert (config.lease_power_limit_watts, config.energy_price_per_kwh) == (250.0, 0.0)


@pytest.mark.parametrize("given", ["438", "rw-rw----", "0o9"])
def test_a_mode_on_the_command_line_that_is_no_octal_says_how_to_write_one(given: str) -> None:
    """`--socket-mode 438` (0o666 in decimal) was refused as "must be a whole number": the
    refusal now says the mode is read in octal and shows how to write one."""
    with pytest.raises(ConfigError) as refused:
        load_config(None, environ={}, socket_mode=given)
    said = refused.value.message
    assert f"socket_mode must be a file mode in octal, e.g. 0660 or 0o660, not {given!r}" in said
