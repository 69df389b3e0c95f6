"""What enabled features need is checked at start: a feature that cannot work stops the
daemon with one line naming the unit line that fixes it; a weakened one is one warning."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from gpulease import Client

from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.startup.needs import Host, Need, needs_of, refuse_unmet, warn_weakened
from gpuallocd.errors import MissingPrivilege
from gpuallocd.host import ProcVisibility, proc_visibility
from tests.harness import DaemonPaths, ProcessDaemon
from tests.service_unit import shipped_unit

EVERYTHING = frozenset(shipped_unit().capabilities)
BEFORE_THIS_ISSUE = ("CAP_CHOWN", "CAP_SYS_ADMIN")  # the unit's set when it shipped first


def check_needs(config: DaemonConfig, host: Host) -> list[Need]:
    """What a start does with the needs: refuse (MissingPrivilege) where an enabled feature
    cannot work, then warn once per weakened one (daemon/startup/preflight.py, lifecycle.py)."""
    needs = refuse_unmet(config, host)
    warn_weakened(needs)
    return needs


def root_with(*capabilities: str, **facts: object) -> Host:
    return Host(euid=0, capabilities=frozenset(capabilities), **facts)  # type: ignore[arg-type]


def test_the_units_capabilities_meet_every_feature_it_ships() -> None:
    """With everything on, the unit's capabilities meet every need."""
    config = DaemonConfig(
        share_enforcement="kill", inventory="nvml", socket_group="gpu", socket_mode=0o660
    )
    unmet = [n.line() for n in needs_of(config, Host(euid=0, capabilities=EVERYTHING)) if not n.met]
    assert unmet == []


def test_kill_enforcement_without_cap_kill_is_refused_naming_the_fix() -> None:
    """`share_enforcement = "kill"` where the daemon may not signal: the start is refused,
    and the message names the setting, the capability and the unit line."""
    config = DaemonConfig(share_enforcement="kill")
    host = root_with("CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE")
    with pytest.raises(MissingPrivilege) as refused:
        check_needs(config, host)
    message = refused.value.message
    assert 'share_enforcement = "kill" needs CAP_KILL' in message
    assert "CapabilityBoundingSet=CAP_KILL" in message
    assert "\n" not in message


def test_revoke_without_cap_kill_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Revoke is always on: without CAP_KILL it is weakened, not refused; one warning."""
    host = root_with(*BEFORE_THIS_ISSUE, "CAP_NET_ADMIN")
    needs = check_needs(DaemonConfig(inventory="example:x"), host)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "revoke needs CAP_KILL" in warnings[0]
    assert [n.feature for n in needs if not n.met] == ["revoke"]


def test_process_tracking_without_cap_net_admin_is_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without CAP_NET_ADMIN the kernel's process events may be refused (before 6.6) and
    their buffer stays small: a warning naming the setting and the unit line, no refusal;
    `proc-scan` asks for nothing."""
    host = root_with("CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_KILL")
    needs = check_needs(DaemonConfig(inventory="example:x"), host)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert 'process_tracking = "auto" needs CAP_NET_ADMIN' in warnings[0]
    assert "CapabilityBoundingSet=CAP_NET_ADMIN" in warnings[0]
    scan = DaemonConfig(inventory="example:x", process_tracking="proc-scan")
    assert all(n.met for n in check_needs(scan, host) if n.feature != "bound leases")
    assert [n for n in needs if not n.met and n.required] == []


def test_in_a_container_cap_net_admin_is_not_asked_for() -> None:
    """In a pid namespace of its own the kernel sends no process events whatever the daemon
    holds: no need is shown for them (the process tracking line says why it scans)."""
    host = root_with("CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_KILL", own_namespaces=("pid",))
    needs = needs_of(DaemonConfig(inventory="example:x"), host)
    assert not any("CAP_NET_ADMIN" in n.requirement for n in needs)


def test_a_hidden_proc_without_ptrace_is_refused() -> None:
    """/proc mounted hidepid=invisible: other users' holders would look gone, so the
    daemon refuses to start unless it may still see them (CAP_SYS_PTRACE, or the gid)."""
    hidden = ProcVisibility(hidepid="invisible", gid=1234)
    with pytest.raises(MissingPrivilege, match="hidepid=invisible"):
        check_needs(DaemonConfig(), root_with("CAP_KILL", proc=hidden))
    check_needs(DaemonConfig(), root_with("CAP_KILL", "CAP_SYS_PTRACE", proc=hidden))
    check_needs(DaemonConfig(), root_with("CAP_KILL", proc=hidden, groups=frozenset({1234})))


def test_proc_mount_options_are_read_from_mountinfo(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc "
        "rw,hidepid=invisible,gid=27\n"
    )
    assert proc_visibility(mountinfo) == ProcVisibility(hidepid="invisible", gid=27)
    assert proc_visibility(tmp_path / "missing") == ProcVisibility()


def test_not_root_is_one_warning_that_names_the_uid() -> None:
    (need,) = [
        n for n in needs_of(DaemonConfig(), Host(euid=1000, capabilities=frozenset())) if not n.met
    ]
    assert "uid 1000" in need.consequence and not need.required


def test_daemon_with_the_first_units_capabilities_refuses_kill_enforcement(
    paths: DaemonPaths, unit_daemon: Callable[..., ProcessDaemon]
) -> None:
    """The issue's setup: the daemon under the first unit's bounding set with kill
    enforcement exits 77 with one line, instead of serving and killing nothing."""
    daemon = ProcessDaemon(
        paths,
        inventory="nvml-recording:dgx-a100-mig",
        bounding_set=BEFORE_THIS_ISSUE,
        share_enforcement="kill",
        shared_gpus=["all"],
    ).start(wait=False)
    assert daemon.process is not None
    assert daemon.process.wait(60) == 77
    lines = daemon.stderr().strip().splitlines()
    assert len(lines) == 1, lines
    assert "CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE" in lines[0]


def test_an_unwritable_textfile_directory_is_refused(
    paths: DaemonPaths, unit_daemon: Callable[..., ProcessDaemon]
) -> None:
    """metrics_textfile in a directory that does not exist: exit 77 naming ReadWritePaths=."""
    missing = paths.root / "no-such-dir" / "gpuallocd.prom"
    daemon = unit_daemon(wait=False, metrics_textfile=str(missing))
    assert daemon.process is not None
    assert daemon.process.wait(60) == 77
    assert f"ReadWritePaths={missing.parent}" in daemon.stderr()


def test_diagnostics_show_the_units_capabilities_and_met_needs(
    unit_daemon: Callable[..., ProcessDaemon],
) -> None:
    """`/v1/diagnostics` (what doctor reads): the daemon holds exactly the unit's
    capabilities, and every need of its features is met."""
    daemon = unit_daemon()
    with Client(daemon.paths.socket) as client:
        found = client.diagnostics()
    assert set(found["capabilities"]["effective"]) == EVERYTHING
    assert found["needs"] and all(need["met"] for need in found["needs"])
    assert found["process_tracking"] and found["cgroup"] in ("v1", "v2", "hybrid", "none")
