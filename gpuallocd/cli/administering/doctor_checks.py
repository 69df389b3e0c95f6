"""The checks of `gpuallocctl doctor`, each a function that looks at one thing of the box the
way an admin would and says ok, warn or fail, with the fix. The daemon's side (its
capabilities, its features' needs, its process tracking, its config) comes from
`/v1/diagnostics`; the rest is read here, on the same machine."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuallocd import __version__
from gpuallocd.cli.quantities import format_duration
from gpuallocd.host import cgroup_version, clock_source, systemd_is_init, users

__all__ = ["FAIL", "OK", "WARN", "Check", "daemon_checks", "host_checks"]

OK, WARN, FAIL = "ok", "warn", "fail"
GOOD_CLOCKS = ("tsc", "kvm-clock", "arch_sys_counter", "hyperv_clocksource_tsc_page", "xen")
ALL_CAPABILITIES = 38  # what full root holds on any kernel of the last years (and more)
UUID_IN_SMI = re.compile(r"\(UUID: (GPU-[0-9a-fA-F-]+)\)")
Diagnostics = Mapping[str, Any]


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    message: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"check": self.name, "status": self.status, "message": self.message, "fix": self.fix}


def daemon_reachable(health: Mapping[str, Any] | None, error: str | None, socket: str) -> Check:
    if health is None:
        fix = "sudo systemctl start gpuallocd.socket gpuallocd.service (docs/systemd.md)"
        return Check("daemon", FAIL, error or f"no daemon answers on {socket}", fix)
    version = health.get("version")
    message = f"gpuallocd {version} answers on {socket}"
    if version != __version__:
        fix = "restart the daemon after an upgrade: sudo systemctl restart gpuallocd"
        return Check("daemon", WARN, f"{message}; this gpuallocctl is {__version__}", fix)
    return Check("daemon", OK, message)


def capabilities(diag: Diagnostics) -> Iterator[Check]:
    """One line for what the daemon holds; one more per need of a feature it lacks."""
    effective = diag["capabilities"]["effective"]
    held = " ".join(name.removeprefix("CAP_") for name in effective)
    if len(effective) >= ALL_CAPABILITIES:
        held = f"all {len(effective)} capabilities"
    unmet = [need for need in diag["needs"] if not need["met"]]
    summary = f"uid {diag['uid']}, {held or 'none'}"
    if not unmet:
        yield Check("capabilities", OK, f"{summary}: every enabled feature has what it needs")
        return
    yield Check("capabilities", WARN, summary)
    for need in unmet:
        status = FAIL if need["required"] else WARN
        message = f"{need['feature']} needs {need['requirement']}: {need['consequence']}"
        yield Check("capabilities", status, message, need["fix"])


def process_tracking(diag: Diagnostics) -> Check:
    mode = str(diag.get("process_tracking", "unknown"))
    detail = diag.get("process_tracking_detail", {})
    if mode == "connector":
        return Check("process tracking", OK, f"{mode}: a fork is covered when it happens")
    if mode == "scope":
        where = detail.get("slice", "a slice") if isinstance(detail, dict) else "a slice"
        message = f"{mode}: each bound lease is a systemd scope in {where}; a fork stays in it"
        return Check("process tracking", OK, message)
    fix = "run the daemon as root in the initial namespaces, as the unit does (docs/security.md)"
    message = f"{mode}: families are learnt by scanning /proc, so a short-lived parent can hide"
    reason = detail.get("reason") if isinstance(detail, dict) else None
    why = f" ({reason})" if reason else ""
    return Check("process tracking", WARN, message + " a child between two scans" + why, fix)


def config(diag: Diagnostics) -> Iterator[Check]:
    warnings = list(diag.get("config_warnings", ()))
    refused = diag.get("reload_refused")
    if refused:
        yield Check(
            "config",
            FAIL,
            f"the last reload was refused, the rules in force are older: {refused['message']}",
            "fix the file, then `sudo systemctl reload gpuallocd` (docs/configuration.md)",
        )
    if not warnings and not refused:
        yield Check("config", OK, "no warnings")
    for warning in warnings:
        yield Check("config", WARN, warning)


PORT_FIX = (
    "free the port (ss -ltnp shows who holds it; the daemon tries it again every 10 s); "
    "keep it the daemon's with a port below 1024, which only root may bind, and a reverse "
    "proxy or socket unit in front where users need another address (docs/security.md)"
)


def ports(diag: Diagnostics) -> Iterator[Check]:
    """One line per TCP port (metrics, dashboard): served, or why not."""
    for port in diag.get("ports", ()):
        if port["serving"]:
            yield Check("ports", OK, f"{port['port']} on {port['listen']}")
        else:
            yield Check("ports", FAIL, str(port["error"]), PORT_FIX)


def service(diag: Diagnostics) -> Check:
    systemd = diag.get("systemd", {})
    if not systemd.get("notify"):
        fix = "install the units of systemd/ (README, Running it as a service)"
        return Check("service", WARN, "the daemon is not run by systemd: no watchdog", fix)
    ping = systemd.get("watchdog_ping_seconds")
    if ping is None:
        return Check("service", WARN, "under systemd without a watchdog", "keep WatchdogSec=30")
    return Check("service", OK, f"under systemd, watchdog pinged every {format_duration(ping)}")


def socket_file(path: str) -> Check:
    try:
        found = os.stat(path)
    except OSError as exc:
        return Check("socket", FAIL, f"{path}: {exc.strerror}")
    if not stat.S_ISSOCK(found.st_mode):
        return Check("socket", FAIL, f"{path} is not a socket")
    mode = stat.filemode(found.st_mode)
    message = f"{path} {mode} uid {found.st_uid} gid {found.st_gid}"
    if found.st_mode & 0o002 and found.st_mode & 0o020 == 0:
        return Check("socket", WARN, message, "a world-writable socket with a group is unusual")
    return Check("socket", OK, message)


def _smi_uuids() -> list[str] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return UUID_IN_SMI.findall(listing.stdout)


def _nvml_uuids() -> tuple[str, list[str]]:
    """The driver version and the GPUs NVML lists here (NvmlError where it cannot start)."""
    from gpuallocd.inventory.nvml.api import NvmlApi
    from gpuallocd.inventory.nvml.gate import NvmlGate

    api = NvmlApi(NvmlGate())
    api.start()
    try:
        uuids = [api.uuid(api.handle(i)) for i in range(api.device_count())]
        return api.driver_version(), uuids
    finally:
        api.close()


def nvml(inventory: str | None, daemon_uuids: Sequence[str]) -> Check:
    from gpuallocd.errors import NvmlError

    try:
        driver, uuids = _nvml_uuids()
    except NvmlError as exc:
        if inventory == "nvml":
            return Check("nvml", FAIL, exc.message, "the daemon needs NVML (inventory = nvml)")
        where = "an unknown inventory" if inventory is None else f"inventory {inventory}"
        return Check("nvml", OK, f"no NVIDIA driver here; the daemon runs on {where}")
    message = f"driver {driver}, {len(uuids)} GPU(s)"
    smi = _smi_uuids()
    if smi is not None and sorted(smi) != sorted(uuids):
        return Check("nvml", FAIL, f"{message}; nvidia-smi -L lists {len(smi)} other(s)")
    if inventory == "nvml" and sorted(daemon_uuids) != sorted(uuids):
        fix = "sudo gpuallocctl rescan, or restart the daemon"
        return Check("nvml", WARN, f"{message}; the daemon knows {len(daemon_uuids)}", fix)
    return Check("nvml", OK, message + ("; nvidia-smi -L agrees" if smi is not None else ""))


def amdsmi(daemon_uuids: Sequence[str]) -> Check:
    """amdsmi starts here and counts the GPUs the daemon knows (inventory = amdsmi)."""
    from gpuallocd.errors import InventoryError
    from gpuallocd.inventory.amd.gate import AmdGate

    gate = AmdGate()
    try:
        handles = gate.call("amdsmi_get_processor_handles")
    except InventoryError as exc:
        return Check("amdsmi", FAIL, exc.message, "the daemon needs amdsmi (inventory = amdsmi)")
    finally:
        gate.shutdown()
    message = f"{len(handles)} GPU(s); the daemon knows {len(daemon_uuids)}"
    status = OK if len(handles) == len(daemon_uuids) else WARN
    return Check("amdsmi", status, message, None if status == OK else "sudo gpuallocctl rescan")


def device_files(inventory: str | None, dev: Path = Path("/dev")) -> Check:
    nodes = sorted(dev.glob("nvidia*")) + sorted(dev.glob("nvidia-caps/*"))
    if not nodes:
        status = FAIL if inventory == "nvml" else OK
        return Check("devices", status, f"no NVIDIA device files in {dev}")
    modes: dict[str, list[str]] = {}
    for node in nodes:
        found = node.stat()
        if stat.S_ISCHR(found.st_mode):
            modes.setdefault(stat.filemode(found.st_mode), []).append(node.name)
    shown = "; ".join(f"{mode} {', '.join(names)}" for mode, names in sorted(modes.items()))
    return Check("devices", OK, shown)


def cgroups() -> Check:
    version = cgroup_version()
    init = "systemd is PID 1" if systemd_is_init() else "systemd is not PID 1"
    if version == "v2" and systemd_is_init():
        return Check("cgroups", OK, f"cgroup v2 (unified), {init}")
    fix = "boot with the unified hierarchy (systemd.unified_cgroup_hierarchy=1)"
    return Check("cgroups", WARN, f"cgroup {version}, {init}", fix)


def clock(diag: Diagnostics | None) -> Check:
    source = clock_source()
    expiry = (diag or {}).get("clock", {}).get("expiry", "CLOCK_BOOTTIME")
    message = f"clock source {source}; expiry on {expiry}"
    if source is not None and source not in GOOD_CLOCKS:
        fix = "a slow or coarse clock source: check dmesg for tsc instability"
        return Check("clock", WARN, message, fix)
    return Check("clock", OK, message)


def ledger(diag: Diagnostics) -> Check:
    """The ledger's check at start, and how old its newest backup is (docs/recovery.md)."""
    found = diag.get("ledger")
    if found is None:
        return Check("ledger", WARN, "this daemon does not report its ledger", None)
    message = f"integrity at start: {found['integrity_at_start']}"
    if found["backups_kept"] == 0:
        fix = "set ledger_backups (docs/recovery.md): without a backup, a damaged ledger loses"
        return Check("ledger", WARN, f"{message}; backups are off", fix + " what it cannot read")
    age = found["newest_backup_age_seconds"]
    if age is None:
        fix = "take one now: gpuallocctl ledger backup"
        return Check("ledger", WARN, f"{message}; no backup yet", fix)
    message += f"; newest of {found['backups']} backup(s) is {format_duration(age)} old"
    if age > 2 * found["backup_interval_seconds"] + 60:
        fix = "backups are late: see the daemon's log; gpuallocctl ledger verify"
        return Check("ledger", WARN, message, fix)
    return Check("ledger", OK, message)


def driver(diag: Diagnostics) -> Check:
    """Whether a GPU driver call hangs: its name and for how long (docs/driver-faults.md)."""
    found = diag.get("driver")
    if not isinstance(found, dict) or not found:
        return Check("driver", WARN, "the daemon does not report its GPU driver calls (older)")
    hung = found.get("hung_calls") or []
    if not hung:
        deadline = found.get("deadline_seconds")
        within = f"within {format_duration(deadline)}" if deadline is not None else "in time"
        return Check("driver", OK, f"every GPU driver call answers {within}")
    calls = ", ".join(f"{c['call']} for {format_duration(c['seconds'])}" for c in hung)
    paused = ", ".join(found.get("paused") or []) or "nothing"
    message = f"GPU driver call hung: {calls}; paused: {paused}; the API answers from the ledger"
    fix = "look for Xid errors in `dmesg` and a stuck nvidia process; a GPU reset or reboot ends it"
    return Check("driver", FAIL, message, fix)


def cleanups(diag: Diagnostics) -> Check:
    """Cleanups owed after leases ended that have failed so far (docs/driver-faults.md)."""
    owed = diag.get("pending_cleanups")
    if not isinstance(owed, list):
        return Check("cleanups", WARN, "the daemon does not report its pending cleanups (older)")
    failing = [c for c in owed if c.get("attempts")]
    if not failing:
        return Check("cleanups", OK, f"{len(owed)} owed, none failing")
    shown = "; ".join(
        f"{c['kind']} {c['target']} ({c['attempts']} failed: {c['last_error']})" for c in failing
    )
    fix = "fix what the error names; the daemon retries each until it is done (no restart)"
    return Check("cleanups", WARN, f"{len(failing)} failing: {shown}", fix)


def notify_channels(diag: Diagnostics) -> Check:
    """Users' and the site's notification channels whose last delivery failed (by kind and
    user: the daemon never learns a target or a secret; docs/notifications.md)."""
    found = diag.get("notify_channels")
    if not isinstance(found, dict):
        return Check("notify", WARN, "the daemon does not report notification channels (older)")
    failing = found.get("failing", [])
    if not failing:
        return Check("notify", OK, f"{found.get('channels', 0)} channel(s) reported, none failing")
    shown = "; ".join(
        f"{'site' if c['uid'] == -1 else _user(c['uid'])} {c['kind']} {c['channel']} "
        f"({c['failures']} in a row: {c['error']})"
        for c in failing[:10]
    )
    fix = "each user: gpuallocctl notify list, then notify test; site channels: the daemon's log"
    return Check("notify", WARN, f"{len(failing)} failing: {shown}", fix)


def _user(uid: int) -> str:
    found = users.account(uid)
    return f"uid {uid}" if found is None else found.name


def daemon_checks(diag: Diagnostics) -> list[Check]:
    return [
        *capabilities(diag),
        driver(diag),
        cleanups(diag),
        notify_channels(diag),
        process_tracking(diag),
        service(diag),
        *ports(diag),
        ledger(diag),
        *config(diag),
    ]


def host_checks(socket: str, diag: Diagnostics | None, daemon_uuids: Sequence[str]) -> list[Check]:
    inventory = None if diag is None else str(diag.get("inventory"))
    gpu_library = amdsmi(daemon_uuids) if inventory == "amdsmi" else nvml(inventory, daemon_uuids)
    return [
        socket_file(socket),
        gpu_library,
        device_files(inventory),
        cgroups(),
        clock(diag),
    ]
