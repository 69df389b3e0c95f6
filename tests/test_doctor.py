"""`gpuallocctl doctor` checks a box as an admin would: one line per check, the fix on the
next, JSON for scripts, exit 1 when a check fails."""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Callable

from click.testing import CliRunner

from gpuallocd.cli import cli
from tests.harness import DaemonPaths, ProcessDaemon, ThreadDaemon, ctl_argv

CHECKS = [
    "daemon",
    "capabilities",
    "driver",
    "cleanups",
    "notify",
    "process tracking",
    "service",
    "ledger",
    "config",
    "socket",
    "nvml",
    "devices",
    "cgroups",
    "clock",
]


def doctor(socket: object, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ctl_argv(socket, "doctor", *args),
        capture_output=True,
        text=True,
        timeout=60,  # type: ignore[arg-type]
    )


def test_a_healthy_daemon_passes_every_check_it_can(daemon: ThreadDaemon) -> None:
    """Every check has its line; none fails; a warning carries its fix on the next line."""
    done = doctor(daemon.paths.socket)
    assert done.returncode == 0, done.stdout
    lines = [line for line in done.stdout.splitlines() if not line.startswith(" ")]
    assert [line[6:23].strip() for line in lines] == CHECKS
    assert all(line.split()[0] in ("ok", "warn") for line in lines)
    assert "gpuallocd 0.1.0 answers on" in lines[0]
    output = done.stdout.splitlines()
    for line, after in itertools.pairwise(output):
        if line.startswith("warn"):
            assert after.strip().startswith("fix: ")


def test_json_lists_each_check_with_its_status_and_fix(daemon: ThreadDaemon) -> None:
    found = json.loads(doctor(daemon.paths.socket, "--json").stdout)
    assert [c["check"] for c in found["checks"]] == CHECKS
    assert found["failed"] == 0
    assert all(set(c) == {"check", "status", "message", "fix"} for c in found["checks"])


def test_no_daemon_is_a_failure_with_exit_1(paths: DaemonPaths) -> None:
    done = doctor(paths.socket)
    assert done.returncode == 1
    assert done.stdout.startswith("fail  daemon")
    assert "fix: sudo systemctl start gpuallocd.socket gpuallocd.service" in done.stdout


def test_a_feature_without_its_capability_is_named_with_the_unit_line(
    paths: DaemonPaths, unit_daemon: Callable[..., ProcessDaemon]
) -> None:
    """The daemon under the first unit's capabilities: doctor warns that a revoke cannot
    stop other users' processes, and says which line of the unit gives it the capability."""
    daemon = ProcessDaemon(
        paths, bounding_set=("CAP_CHOWN", "CAP_SYS_ADMIN"), default_policy="simple"
    ).start()
    try:
        done = doctor(paths.socket)
    finally:
        daemon.stop()
    assert done.returncode == 0
    assert "warn  capabilities      revoke needs CAP_KILL" in done.stdout
    assert "fix: add `CapabilityBoundingSet=CAP_KILL` to gpuallocd.service" in done.stdout


def test_config_warnings_are_shown(start_daemon: Callable[..., ThreadDaemon]) -> None:
    """A socket group with a mode that lets everyone in limits nothing: doctor says so."""
    daemon = start_daemon(socket_group="root", socket_mode=0o666)
    result = CliRunner().invoke(cli, ["--socket", str(daemon.paths.socket), "doctor"])
    assert "warn  config            socket_group = 'root' limits nothing" in result.output


def test_every_check_is_documented() -> None:
    """docs/doctor.md has a row for each check, and its sample output shows each one."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "doctor.md").read_text()
    for name in CHECKS:
        assert f"| `{name}` |" in text, name
        assert f"  {name} " in text, name


def test_an_amd_daemon_is_checked_with_amdsmi_not_nvml(paths: DaemonPaths) -> None:
    """For a daemon on `inventory = amdsmi`, amdsmi is what must load; without ROCm here it
    fails and says what to install."""
    from gpuallocd.cli.administering.doctor_checks import FAIL, host_checks

    checks = {c.name: c for c in host_checks(str(paths.socket), {"inventory": "amdsmi"}, [])}
    assert "nvml" not in checks
    assert checks["amdsmi"].status == FAIL and "amdsmi" in checks["amdsmi"].message


def test_the_process_tracking_line_is_the_mode_in_force(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """As root the kernel's events are in force and doctor says so; with `proc-scan` asked
    for, doctor warns that a short-lived parent can hide a child, and says why."""
    connector = doctor(start_daemon(default_policy="simple").paths.socket, "--json")
    line = next(
        c for c in json.loads(connector.stdout)["checks"] if c["check"] == "process tracking"
    )
    if line["status"] == "ok":
        assert line["message"].startswith("connector: a fork is covered when it happens")
    else:  # a host that refuses the events (not root, a container) falls back on its own
        assert "proc-scan" in line["message"] and "unavailable" in line["message"]


def test_proc_scan_asked_for_is_a_warning_with_its_reason(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    daemon = start_daemon(default_policy="simple", process_tracking="proc-scan")
    found = json.loads(doctor(daemon.paths.socket, "--json").stdout)
    line = next(c for c in found["checks"] if c["check"] == "process tracking")
    assert line["status"] == "warn"
    assert "proc-scan" in line["message"] and 'process_tracking = "proc-scan"' in line["message"]
    assert line["fix"]


def test_a_power_budget_with_unleased_use_only_reported_is_a_warning(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """Under a power budget, draw without a lease that is only reported takes the budget from
    leases: doctor says so and how to stop it; with `terminate` it says nothing of it."""
    reported = start_daemon(default_policy="simple", power_budget_watts=1100)
    done = doctor(reported.paths.socket, "--json")
    (line,) = [c for c in json.loads(done.stdout)["checks"] if "power_budget_watts" in c["message"]]
    assert (line["check"], line["status"]) == ("config", "warn")
    assert line["message"].startswith('power_budget_watts = 1100 while unleased_use = "report"')
    assert "counts against the budget" in line["message"]
    assert 'set unleased_use = "terminate" in each place named' in line["message"]
    reported.stop()
    stopped = start_daemon(
        default_policy="simple", power_budget_watts=1100, unleased_use="terminate"
    )
    assert "power_budget_watts" not in doctor(stopped.paths.socket).stdout


def test_the_power_budget_warning_names_each_table_that_only_reports() -> None:
    """Site-wide `terminate`, but students' and one user's tables only report (or are off):
    the warning names those tables; without a budget there is nothing to warn of."""
    from gpuallocd.daemon.config.machine_checks import config_warnings
    from gpuallocd.daemon.config.settings import DaemonConfig
    from gpuallocd.enforcement import UnleasedModes

    modes = UnleasedModes(users={"eve": "off", "ann": "terminate"}, groups={"students": "report"})
    config = DaemonConfig(power_budget_watts=900, unleased_use="terminate", unleased_modes=modes)
    (warning,) = [w for w in config_warnings(config) if "power_budget_watts" in w]
    assert warning.startswith(
        'power_budget_watts = 900 while [limits.group.students] unleased_use = "report", '
        '[limits.user.eve] unleased_use = "off": '
    )
    quiet = DaemonConfig(unleased_use="report", unleased_modes=modes)
    assert not [w for w in config_warnings(quiet) if "power_budget_watts" in w]


def test_doctor_writes_durations_as_every_command_does(daemon: ThreadDaemon) -> None:
    """The driver's deadline, a hung call's time and the newest backup's age read `10s`,
    `1h10m`, `2h05m`, as `status`, `queue` and `leases` write durations (not `10.0 s`,
    `4230.0 s`, `2.1 h`)."""
    from gpuallocd.cli.administering.doctor_checks import driver, ledger

    done = doctor(daemon.paths.socket)
    (line,) = [line for line in done.stdout.splitlines() if line[6:23].strip() == "driver"]
    assert line.endswith("answers within 10s"), line
    hung = {"hung_calls": [{"call": "nvmlDeviceGetMemoryInfo", "seconds": 4230.5}]}
    assert "nvmlDeviceGetMemoryInfo for 1h10m;" in driver({"driver": hung}).message
    backups = {
        "integrity_at_start": "ok",
        "backups_kept": 8,
        "backups": 3,
        "newest_backup_age_seconds": 7500.0,
        "backup_interval_seconds": 3600.0,
    }
    assert ledger({"ledger": backups}).message.endswith("3 backup(s) is 2h05m old")
