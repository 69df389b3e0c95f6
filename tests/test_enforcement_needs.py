"""What enforcement needs from the host, checked at start (daemon/startup/needs.py): stopping
processes needs CAP_KILL, ACLs on device files another uid owns need CAP_FOWNER; and the
per-group override of the mode is read strictly from the limits table."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuallocd.allocator import Limits
from gpuallocd.daemon.config.limits_table import parse_limits, parse_unleased_modes
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.config.wiring import unleased_rules
from gpuallocd.daemon.startup.needs import Host, needs_of
from gpuallocd.enforcement import UnleasedModes
from gpuallocd.errors import ConfigError, MissingPrivilege
from tests.service_unit import shipped_unit
from tests.test_needs import check_needs

EVERYTHING = frozenset(shipped_unit().capabilities)


def root_with(*capabilities: str) -> Host:
    return Host(euid=0, capabilities=frozenset(capabilities))


def test_terminate_without_cap_kill_is_refused_naming_the_fix() -> None:
    """`unleased_use = "terminate"` where the daemon may not signal: the start is refused."""
    with pytest.raises(MissingPrivilege) as refused:
        check_needs(DaemonConfig(unleased_use="terminate"), root_with())
    assert 'unleased_use = "terminate"' in refused.value.message
    assert "CapabilityBoundingSet=CAP_KILL" in refused.value.message


def test_a_groups_terminate_needs_cap_kill_too() -> None:
    """The site reports, but one group's override terminates: CAP_KILL is still needed."""
    modes = UnleasedModes(groups={"students": "terminate"})
    with pytest.raises(MissingPrivilege):
        check_needs(DaemonConfig(unleased_modes=modes), root_with())


def test_the_units_capabilities_meet_enforcement() -> None:
    """Every mode and device ACLs on root's device files: the unit's capabilities suffice."""
    for mode in ("report", "terminate", "adopt"):
        config = DaemonConfig(unleased_use=mode, device_access="acl")
        unmet = [n.line() for n in needs_of(config, Host(0, EVERYTHING)) if not n.met]
        assert unmet == []


def test_device_files_of_another_owner_need_cap_fowner(tmp_path: Path) -> None:
    """ACLs on device files owned by another uid (NVreg_DeviceFileUID) need CAP_FOWNER."""
    node = tmp_path / "nvidia0"
    os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(195, 0))
    os.chown(node, 4321, 0)
    config = DaemonConfig(device_access="acl", device_dir=str(tmp_path))
    with pytest.raises(MissingPrivilege) as refused:
        check_needs(config, root_with(*EVERYTHING))
    assert "CAP_FOWNER" in refused.value.message and "uid 4321" in refused.value.message


def test_the_limits_table_takes_the_mode_per_group_and_user() -> None:
    """`unleased_use` in `[limits.group.NAME]` and `[limits.user.NAME]`: the user's own wins,
    else the most lenient group's; a wrong value is a ConfigError naming the table."""
    tables = {
        "group": {"staff": {"unleased_use": "off"}, "students": {"unleased_use": "adopt"}},
        "user": {"bob": {"unleased_use": "terminate"}},
    }
    modes = parse_unleased_modes(tables, "gpuallocd.toml")
    assert parse_limits(tables, "gpuallocd.toml").users["bob"] == Limits()  # not a limit
    rules = unleased_rules(DaemonConfig(unleased_modes=modes))
    assert rules.mode_for("alice", {"students"}) == "adopt"
    assert rules.mode_for("carol", {"students", "staff"}) == "off"
    assert rules.mode_for("bob", {"staff"}) == "terminate"
    assert rules.mode_for("dave", set()) == "report"
    with pytest.raises(ConfigError, match=r"\[limits.group.x\]: unleased_use must be one of"):
        parse_limits({"group": {"x": {"unleased_use": "kill"}}}, "gpuallocd.toml")
