"""Settings: one table feeds the config file, the environment and the daemon's options."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuallocd.daemon.config.loading import load_config, parse_text
from gpuallocd.daemon.config.settings import DaemonConfig, Setting, settings
from gpuallocd.daemon.main import main as daemon_main
from gpuallocd.errors import ConfigError

SAMPLES = {
    "socket": "/tmp/x.sock",
    "socket_mode": "0660",
    "socket_group": "gpu-users",
    "state_dir": "/tmp/state",
    "inventory": "example:dgx1-volta",
    "default_policy": "simple",
    "default_ttl_seconds": "120",
    "max_ttl_seconds": "3600.5",
    "sample_interval_seconds": "0.5",
    "driver_call_timeout_seconds": "3.0",
    "max_body_bytes": "1024",
    "ledger_sync": "normal",
    "ledger_backups": "3",
    "ledger_backup_interval_seconds": "60",
    "shutdown_grace_seconds": "1",
    "log_level": "DEBUG",
    "shared_gpus": "all",
    "share_memory_reserve_bytes": "2048",
    "share_enforcement": "warn",
    "process_tracking": "proc-scan",
    "metrics_listen": "127.0.0.1:9423",
    "dashboard_listen": "127.0.0.1:8423",
    "metrics_textfile": "/tmp/gpuallocd.prom",
    "cdi_spec_path": "/run/cdi/gpuallocd.json",
    "admin_groups": "gpuadmin, wheel",
    "idle_reclaim_minutes": "30",
    "idle_grace_minutes": "5",
    "history_retention_days": "30",
    "revoke_grace_seconds": "5",
    "preempt_min_runtime_seconds": "600",
    "preempt_lead_seconds": "0",
    "preempt_grace_seconds": "120",
    "queue_order": "fair-share",
    "fair_share_half_life_hours": "24",
    "fair_share_wait_weight": "2.5",
    "fair_share_by": "group",
    "fair_share_unleased": "count",
    "lease_power_limit_watts": "250",
    "power_budget_watts": "1600",
    "power_fit": "cap",
    "energy_interval_seconds": "30",
    "energy_price_per_kwh": "0.32",
    "energy_currency": "EUR",
    "unleased_use": "terminate",
    "unleased_grace_seconds": "30",
    "unleased_over_limit": "terminate",
    "unleased_exempt_users": "monitor, backup",
    "unleased_exempt_commands": "Xorg, dcgm",
    "device_access": "acl",
    "device_dir": "/srv/dev",
    "max_connections_per_user": "8",
    "max_connections": "100",
    "root_reserved_connections": "4",
    "request_head_timeout_seconds": "2.5",
    "request_body_timeout_seconds": "3",
    "notify_retention_days": "30",
    "notify_site_channels": "webhook https://chat.example.org/hooks/gpus",
    "notify_site_events": "gpu-unhealthy,revoked",
    "notify_site_secret_file": "/etc/gpuallocd/site-webhook.secret",
}


def test_every_setting_has_a_sample_here() -> None:
    """The samples below cover the whole table (a new setting needs one)."""
    assert sorted(SAMPLES) == sorted(s.name for s in settings())


@pytest.mark.parametrize("setting", settings(), ids=lambda s: s.name)
def test_every_setting_reads_from_the_environment(setting: Setting) -> None:
    """GPUALLOCD_<NAME> sets each setting, converted to its type."""
    config = load_config(environ={setting.env: SAMPLES[setting.name]})
    value = getattr(config, setting.name)
    assert value != getattr(DaemonConfig(), setting.name)
    assert isinstance(value, setting.type)


@pytest.mark.parametrize("setting", settings(), ids=lambda s: s.name)
def test_every_setting_is_a_daemon_option(setting: Setting) -> None:
    """`gpuallocd --help` lists `--<name>` for each setting, with its environment variable."""
    result = CliRunner().invoke(daemon_main, ["--help"], terminal_width=200)
    assert setting.option in result.output and setting.env in result.output


def test_options_beat_the_environment_which_beats_the_file(tmp_path: Path) -> None:
    """Defaults < file < environment < options."""
    file = tmp_path / "c.toml"
    file.write_text('default_policy = "packed"\nlog_level = "ERROR"\nmax_body_bytes = 10\n')
    config = load_config(
        file,
        environ={"GPUALLOCD_DEFAULT_POLICY": "spread", "GPUALLOCD_LOG_LEVEL": "WARNING"},
        log_level="DEBUG",
    )
    assert (config.max_body_bytes, config.default_policy, config.log_level) == (
        10,
        "spread",
        "DEBUG",
    )


@pytest.mark.parametrize(
    ("name", "text"),
    [("max_body_bytes", "lots"), ("ledger_sync", "sometimes"), ("default_ttl_seconds", "1h")],
)
def test_a_bad_environment_value_names_the_variable(name: str, text: str) -> None:
    """A value of the wrong type or outside the choices is a ConfigError naming its source."""
    env = f"GPUALLOCD_{name.upper()}"
    with pytest.raises(ConfigError, match=env):
        load_config(environ={env: text})


def test_a_boolean_setting_reads_the_usual_words() -> None:
    """Booleans take true/false, yes/no, 1/0 as text, and never a number in TOML."""
    flag = Setting("flag", bool, False, False, "a flag", (), False, None)
    assert [parse_text(flag, t, "here") for t in ("yes", "TRUE", "0", "no")] == [
        True,
        True,
        False,
        False,
    ]
    with pytest.raises(ConfigError, match="flag must be true or false"):
        parse_text(flag, "maybe", "here")


def test_the_daemon_exits_78_on_a_bad_environment_value(short_dir: Path) -> None:
    """A wrong GPUALLOCD_* value stops the daemon before it starts, with one line."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpuallocd", "--state-dir", str(short_dir / "s")],
        env={"GPUALLOCD_LEDGER_SYNC": "sometimes", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == ConfigError.exit_code
    assert proc.stderr.strip().splitlines() == [
        "gpuallocd: environment GPUALLOCD_LEDGER_SYNC: ledger_sync must be one of full, normal"
    ]


@pytest.mark.parametrize("name", ["fair_share_half_life_hours", "fair_share_wait_weight"])
@pytest.mark.parametrize("value", ["0", "-1", "inf"])
def test_fair_share_numbers_must_be_positive(name: str, value: str) -> None:
    """A zero wait weight would let a heavy account's waiter starve; a zero half-life
    would divide by zero: both refused at start, naming the setting."""
    with pytest.raises(ConfigError, match=name):
        load_config(environ={f"GPUALLOCD_{name.upper()}": value})


def test_the_clients_socket_variable_does_not_move_a_daemon_with_a_config_file(
    tmp_path: Path,
) -> None:
    """GPUALLOCD_SOCKET (exported for the client) and a file naming `socket`: the file wins,
    and the daemon is told why; without `socket` in the file the variable is used; the
    option beats both."""
    file = tmp_path / "c.toml"
    file.write_text('socket = "/run/from-file.sock"\n')
    clients = {"GPUALLOCD_SOCKET": "/tmp/from-env.sock"}
    notes: list[str] = []
    assert load_config(file, environ=clients, notes=notes).socket == "/run/from-file.sock"
    assert notes == [
        "GPUALLOCD_SOCKET=/tmp/from-env.sock is not used: config file "
        f"{file} sets socket = '/run/from-file.sock' (the variable is read when the file "
        "names no socket; --socket overrides both)"
    ]
    assert load_config(file, environ=clients, socket="/x.sock").socket == "/x.sock"
    file.write_text('log_level = "INFO"\n')
    assert load_config(file, environ=clients).socket == "/tmp/from-env.sock"


def test_a_daemon_started_in_a_shell_with_the_clients_variable_serves_its_files_socket(
    short_dir: Path,
) -> None:
    """`gpuallocd --config FILE` in the quickstart's shell serves where FILE says, and logs
    that it left GPUALLOCD_SOCKET alone."""
    from tests.harness import DEFAULT_INVENTORY, wait_until_serving

    socket, elsewhere = short_dir / "file.sock", short_dir / "env.sock"
    file = short_dir / "c.toml"
    file.write_text(f'socket = "{socket}"\nstate_dir = "{short_dir / "state"}"\n')
    environ = {**os.environ, "GPUALLOCD_SOCKET": str(elsewhere)}
    argv = [sys.executable, "-m", "gpuallocd", "--config", str(file), "--init"]
    daemon = subprocess.Popen(
        [*argv, "--inventory", DEFAULT_INVENTORY],
        env=environ,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_serving(socket)
        assert not elsewhere.exists()
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, log = daemon.communicate(timeout=30)
    assert f"GPUALLOCD_SOCKET={elsewhere} is not used: config file {file}" in log


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("notify_site_channels", "webhook file:///etc/shadow"),
        ("notify_site_channels", "mail root@localhost"),
        ("notify_site_events", "everything"),
        ("notify_retention_days", "0"),
    ],
)
def test_a_bad_notification_setting_refuses_to_start(key: str, value: str) -> None:
    """A site channel that is not `webhook URL` or `ntfy URL/TOPIC`, an unknown event, a
    retention of nothing: refused with the setting named."""
    with pytest.raises(ConfigError, match=key):
        load_config(environ={f"GPUALLOCD_{key.upper()}": value})
