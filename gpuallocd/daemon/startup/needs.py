"""What the enabled features need from the host, checked once at start: never a silent no-op.

Each feature that acts on other users' processes or writes outside the state directory names
what it needs (a capability, a visible /proc, a writable directory). At start the daemon
checks them against what it really holds (`Host`, read from the kernel): a feature the config
turns on explicitly that cannot work stops the start (`MissingPrivilege`, exit 77), naming what
is missing and the unit line or setting that fixes it; a feature that is always on and would
only be weakened gets one warning line in the log. `gpuallocctl doctor` shows the same list.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.config.wiring import terminates
from gpuallocd.enforcement.devices import open_to_users
from gpuallocd.errors import MissingPrivilege
from gpuallocd.host import (
    Capabilities,
    ProcVisibility,
    own_namespaces,
    proc_visibility,
    unwritable,
)

__all__ = ["Host", "Need", "needs_of", "refuse_unmet", "warn_weakened"]

log = logging.getLogger("gpuallocd")

UNIT = "gpuallocd.service"


@dataclass(frozen=True)
class Host:
    """What the daemon holds: its uid, capabilities, groups, the /proc mount, and which
    directories it cannot write (asked lazily, per path)."""

    euid: int
    capabilities: frozenset[str]
    groups: frozenset[int] = frozenset()
    proc: ProcVisibility = field(default_factory=ProcVisibility)
    unwritable: Callable[[Path], str | None] = unwritable
    socket_activated: bool = False
    own_namespaces: tuple[str, ...] = ()  # user/pid namespaces of its own (a container)

    @classmethod
    def current(cls, socket_activated: bool = False) -> Host:
        return cls(
            euid=os.geteuid(),
            capabilities=Capabilities.of_process().effective,
            groups=frozenset([os.getegid(), *os.getgroups()]),
            proc=proc_visibility(),
            socket_activated=socket_activated,
            own_namespaces=tuple(own_namespaces()),
        )


@dataclass(frozen=True)
class Need:
    """One thing a feature needs, whether the daemon has it, and how an admin gives it."""

    feature: str
    requirement: str
    consequence: str
    fix: str
    required: bool
    met: bool

    def line(self) -> str:
        return f"{self.feature} needs {self.requirement}: {self.consequence}; {self.fix}"

    def to_json(self) -> dict[str, Any]:
        return {
            "feature": self.feature,
            "requirement": self.requirement,
            "met": self.met,
            "required": self.required,
            "consequence": self.consequence,
            "fix": self.fix,
        }


def _capability_fix(names: list[str]) -> str:
    return (
        f"add `CapabilityBoundingSet={' '.join(names)}` to {UNIT} "
        "(a drop-in: systemctl edit gpuallocd)"
    )


def _capability(
    host: Host, feature: str, names: tuple[str, ...], consequence: str, *, required: bool
) -> Need:
    missing = [name for name in names if name not in host.capabilities]
    return Need(
        feature=feature,
        requirement=" and ".join(names),
        consequence=consequence,
        fix=_capability_fix(missing or list(names)),
        required=required,
        met=not missing,
    )


def _capability_needs(config: DaemonConfig, host: Host) -> Iterator[Need]:
    yield _capability(
        host,
        "revoke",
        ("CAP_KILL",),
        "a revoke cannot stop other users' processes of a lease that asked for it "
        "(gpuallocctl run still stops its own command)",
        required=False,
    )
    if config.process_tracking in ("auto", "connector") and not host.own_namespaces:
        # In a container the kernel sends no events whatever the daemon holds: the process
        # tracking line of doctor and the start's log say so instead.
        yield _capability(
            host,
            f'process_tracking = "{config.process_tracking}"',
            ("CAP_NET_ADMIN",),
            "kernels before 6.6 refuse the process events, so forks are learnt by scanning "
            "/proc once a second, and the events' buffer keeps the system's small default "
            "(more /proc rescans under fork storms)",
            required=False,
        )
    if config.share_enforcement != "off":
        yield _capability(
            host,
            f'share_enforcement = "{config.share_enforcement}"',
            ("CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"),
            "other users' processes cannot be told apart (/proc/PID/environ is unreadable)",
            required=True,
        )
    if config.share_enforcement == "kill":
        yield _capability(
            host,
            'share_enforcement = "kill"',
            ("CAP_KILL",),
            "other users' processes over their share cannot be killed",
            required=True,
        )
    if config.inventory == "nvml":
        yield _capability(
            host,
            'inventory = "nvml"',
            ("CAP_SYS_ADMIN",),
            "NVML lists only the daemon's own processes on the GPUs, so in-use GPUs, "
            "foreign processes and idle reclaim are blind to other users",
            required=False,
        )
    if config.socket_group is not None and not host.socket_activated:
        yield _capability(
            host,
            f'socket_group = "{config.socket_group}"',
            ("CAP_CHOWN",),
            "the socket cannot be given its group",
            required=True,
        )


def _enforcement_needs(config: DaemonConfig, host: Host) -> Iterator[Need]:
    if terminates(config):
        yield _capability(
            host,
            'unleased_use = "terminate"',
            ("CAP_KILL",),
            "other users' processes that use a GPU without a lease cannot be stopped",
            required=True,
        )
    if config.device_access == "acl":
        yield _device_dir_closed(config.device_dir)
        foreign = sorted(device_owners(config.device_dir) - {host.euid})
        if foreign:
            yield _capability(
                host,
                'device_access = "acl"',
                ("CAP_FOWNER",),
                f"device files owned by uid {foreign[0]} cannot get ACLs",
                required=True,
            )
        else:
            yield Need(
                feature='device_access = "acl"',
                requirement=f"owning the device files in {config.device_dir}",
                consequence="the daemon sets their ACLs as their owner",
                fix="",
                required=True,
                met=True,
            )


def _device_dir_closed(directory: str) -> Need:
    problem = open_to_users(directory)
    return Need(
        feature='device_access = "acl"',
        requirement=f"a device directory only root may change ({problem or directory})",
        consequence="a user could rename a device file aside or put a link in its place "
        "and keep the ACL entry a lease gave them",
        fix=f"make {directory} and its subdirectories root's, writable by root only",
        required=True,
        met=problem is None,
    )


def _not_root(host: Host) -> Need:
    return Need(
        feature="acting on other users' processes",
        requirement="root",
        consequence=f"the daemon runs as uid {host.euid}: revoke, enforcement and process "
        "tracking reach only that user's processes",
        fix="run it as the service does (root, with the unit's capabilities)",
        required=False,
        met=False,
    )


def _proc_need(host: Host) -> Need:
    sees = not host.proc.hides_others or "CAP_SYS_PTRACE" in host.capabilities
    if host.proc.gid is not None and host.proc.gid in host.groups:
        sees = True
    return Need(
        feature="bound leases",
        requirement="other users' processes visible in /proc",
        consequence=f"/proc is mounted with hidepid={host.proc.hidepid}, so the holders of "
        "other users' bound leases would look gone and their leases end",
        fix=_capability_fix(["CAP_SYS_PTRACE"]) + ", or mount /proc with gid= of a group "
        "the daemon is in",
        required=True,
        met=sees,
    )


def _path_needs(config: DaemonConfig, host: Host) -> Iterator[Need]:
    for setting, path in (
        ("metrics_textfile", config.metrics_textfile),
        ("cdi_spec_path", config.cdi_spec_path),
    ):
        if path is None:
            continue
        directory = Path(path).parent
        problem = host.unwritable(directory)
        yield Need(
            feature=f"{setting} = {path!r}",
            requirement=f"a writable {directory}",
            consequence=problem or "it is written there",
            fix=f"create {directory}, and add `ReadWritePaths={directory}` to {UNIT}",
            required=True,
            met=problem is None,
        )


def needs_of(config: DaemonConfig, host: Host) -> list[Need]:
    """Every need of the features `config` enables, checked against `host`."""
    found: list[Need] = []
    if host.euid == 0:
        found += _capability_needs(config, host)
        found += _enforcement_needs(config, host)
    else:
        found.append(_not_root(host))
    found.append(_proc_need(host))
    found += _path_needs(config, host)
    return found


def refuse_unmet(config: DaemonConfig, host: Host) -> list[Need]:
    """MissingPrivilege where an enabled feature cannot work, saying nothing else; the needs."""
    needs = needs_of(config, host)
    refused = [need for need in needs if need.required and not need.met]
    if refused:
        raise MissingPrivilege("; ".join(need.line() for need in refused))
    return needs


def warn_weakened(needs: list[Need]) -> None:
    """One warning per feature that works, weakened (logged once start-up cannot be refused)."""
    for need in needs:
        if not need.met:
            log.warning("%s", need.line())


def device_owners(directory: str) -> set[int]:
    """The owners of the GPU device files in `directory` (NVIDIA's and AMD's render nodes:
    character devices only)."""
    owners = set()
    for sub in ("", "nvidia-caps", "dri"):
        try:
            with os.scandir(os.path.join(directory, sub)) as entries:
                for entry in entries:
                    info = entry.stat(follow_symlinks=False)
                    if entry.name.startswith(("nvidia", "renderD")) and stat.S_ISCHR(info.st_mode):
                        owners.add(info.st_uid)  # a link or a plain file gets no ACL
        except OSError:
            continue
    return owners
