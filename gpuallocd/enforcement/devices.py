"""Device access for leaseholders (`device_access = "acl"`): while a lease is active its
owner has read-write on the device files of what it holds, through a POSIX ACL entry; when
it ends the entry goes. With the driver's files closed to users (docs/enforcement.md), only
holders can open a GPU.

Which files a unit has:
- an NVIDIA GPU: `nvidiaN` (N its minor number, from the driver's table; else its index);
- a MIG instance: its GPU's `nvidiaN` and the instance's capability files
  `nvidia-caps/nvidia-capM` (GPU instance and compute instance, M from the driver's
  `/proc/driver/nvidia-caps/mig-minors`);
- an AMD GPU: its render node `dri/renderD*` (from sysfs by PCI address; else 128 + index).
Files every process needs (`nvidiactl`, `nvidia-uvm`, AMD's `kfd`) are left as they are.

Taking an ended lease's entries away is owed work: `cleanups_of` names it (one `device_acl`
cleanup per file), the ledger keeps it in the transaction that ends the lease, and `settle`
does it, as often as it takes (allocator/cleanups.py), until the file says what the ledger
says. A failure at grant is logged; the next grant or end on the file, or a restart, sets it.

An ACL goes only on a character device reached without following a link: each name under
the device directory is opened through its parent's descriptor with `O_NOFOLLOW` (the file
itself with `O_PATH`), checked with `fstat`, and its ACL read and written through that
descriptor. A device directory that anyone but root may write is refused at start
(`open_to_users`): there a user could rename a real node aside, and keep the entry the
daemon gave them on it.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from gpuallocd.enforcement.acl import RW, read_acl, write_acl
from gpuallocd.enforcement.programs import closed_to_users
from gpuallocd.integrations.devices import nvidia_device_nodes
from gpuallocd.model import Gpu, Lease
from gpuallocd.model.cleanup import Cleanup

__all__ = ["DEVICE_ACL", "DeviceAccess", "open_device", "open_to_users", "unit_files"]

DEVICE_ACL = "device_acl"  # the kind of cleanup that takes an ended lease's entry away

log = logging.getLogger(__name__)

MIG_MINORS = Path("/proc/driver/nvidia-caps/mig-minors")
SUBDIRECTORIES = ("nvidia-caps", "dri")
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_MIG_LINE = re.compile(r"^gpu(\d+)/gi(\d+)(?:/ci(\d+))?/access\s+(\d+)$")


def open_to_users(directory: str) -> str | None:
    """Why the device files in `directory` could be moved or replaced by someone other than
    root (it, or a subdirectory of device files, is not root's or others may write it); None
    when they cannot."""
    for sub in ("", *SUBDIRECTORIES):
        path = os.path.join(directory, sub) if sub else directory
        try:
            info = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            if sub:
                continue
            return f"{path} does not exist"
        except OSError as exc:
            return f"{path} cannot be read ({exc.strerror})"
        if not os.path.isdir(path) or os.path.islink(path):
            return f"{path} is not a directory"
        if not closed_to_users(info):
            return f"{path} is not root's, or others than root may write it"
    return None


def open_device(path: str, directory: str) -> int | None:
    """An `O_PATH` descriptor of the character device `path` (under `directory`), reached
    without following a link; None where there is none (a link, another kind of file, no
    file). The caller closes it."""
    parts = os.path.relpath(path, directory).split(os.sep)
    if parts[0] == os.pardir:
        return None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        found = os.open(parts[-1], os.O_PATH | _NOFOLLOW, dir_fd=fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    info = os.fstat(found)
    if not stat.S_ISCHR(info.st_mode) or info.st_nlink != 1:  # a hard link is no device's name
        os.close(found)
        return None
    return found


def mig_minors(path: Path = MIG_MINORS) -> dict[tuple[int, int, int | None], int]:
    """(GPU minor, GPU instance, compute instance or None) → the capability file's minor."""
    found: dict[tuple[int, int, int | None], int] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        match = _MIG_LINE.match(line.strip())
        if match:
            gpu, gi, ci, minor = match.groups()
            found[(int(gpu), int(gi), None if ci is None else int(ci))] = int(minor)
    return found


def _render_node(gpu: Gpu, directory: str, sys_root: Path) -> str:
    bus = (gpu.pci_bus_id or "").lower()
    try:
        names = sorted(p.name for p in (sys_root / bus / "drm").iterdir())
    except OSError:
        names = []
    render = next((n for n in names if n.startswith("renderD")), f"renderD{128 + gpu.index}")
    return os.path.join(directory, "dri", render)


def unit_files(
    gpus: Iterable[Gpu],
    directory: str,
    *,
    nodes: dict[str, str] | None = None,
    minors: dict[tuple[int, int, int | None], int] | None = None,
    sys_root: Path = Path("/sys/bus/pci/devices"),
) -> dict[str, tuple[str, ...]]:
    """Each unit's (GPU's or MIG instance's UUID) device files under `directory`."""
    nodes = nvidia_device_nodes() if nodes is None else nodes
    minors = mig_minors() if minors is None else minors
    files: dict[str, tuple[str, ...]] = {}
    for gpu in gpus:
        if gpu.vendor == "amd":
            files[gpu.uuid] = (_render_node(gpu, directory, sys_root),)
            continue
        name = os.path.basename(nodes.get(gpu.uuid, f"/dev/nvidia{gpu.index}"))
        own = os.path.join(directory, name)
        files[gpu.uuid] = (own,)
        minor = int(name.removeprefix("nvidia"))
        for mig in gpu.mig_devices:
            caps = [
                minors.get((minor, mig.gpu_instance_id or 0, ci))
                for ci in (None, mig.compute_instance_id or 0)
            ]
            paths = [os.path.join(directory, "nvidia-caps", f"nvidia-cap{m}") for m in caps if m]
            files[mig.uuid] = (own, *paths)
    return files


class DeviceAccess:
    """Keeps each device file's named user entries equal to the owners of the active leases
    that hold it (a lease observer: told of every grant and end after its commit)."""

    def __init__(
        self, files: dict[str, tuple[str, ...]], active: Iterable[Lease], directory: str
    ) -> None:
        self._files = files
        self._directory = directory
        self._active = {lease.id: lease for lease in active}
        self._apply({path for paths in files.values() for path in paths})

    def lease_granted(self, lease: Lease) -> None:
        self._active[lease.id] = lease
        self._apply(self._paths(lease))

    def lease_ended(self, lease: Lease) -> None:
        self._active.pop(lease.id, None)
        self._apply(self._paths(lease))

    def commit_published(self) -> None:
        return None

    def allocation_finished(self, seconds: float, *, waited: bool, outcome: str) -> None:
        return None

    def cleanups_of(self, lease: Lease) -> list[Cleanup]:
        """What the end of `lease` owes: its owner's entry off each of its files."""
        payload = {"uid": lease.owner_uid}
        return [Cleanup(DEVICE_ACL, path, payload, lease.id) for path in sorted(self._paths(lease))]

    def settle(self, cleanup: Cleanup) -> None:
        """Make the cleanup's file's entries those of the active leases; OSError when the
        file's ACL cannot be read or written (the cleanup is tried again)."""
        self._set(cleanup.target, self.holders(cleanup.target))

    def _paths(self, lease: Lease) -> set[str]:
        return {path for unit in lease.gpus for path in self._files.get(unit.uuid, ())}

    def holders(self, path: str) -> set[int]:
        """The uids that should have `path` now."""
        return {
            lease.owner_uid
            for lease in self._active.values()
            for unit in lease.gpus
            if path in self._files.get(unit.uuid, ())
        }

    def _apply(self, paths: Iterable[str]) -> None:
        for path in sorted(paths):
            try:
                self._set(path, self.holders(path))
            except OSError as exc:
                log.error("device access: cannot set the ACL of %s: %s", path, exc.strerror)

    def _set(self, path: str, uids: set[int]) -> None:
        fd = open_device(path, self._directory)
        if fd is None:
            if os.path.lexists(path):  # a link or another kind of file: never written through
                raise OSError(errno.ENODEV, "not a character device reached without a link")
            return  # a GPU without its file here (another node's layout): nothing to open
        try:
            self._set_on(f"/proc/self/fd/{fd}", uids)
        finally:
            os.close(fd)

    @staticmethod
    def _set_on(path: str, uids: set[int]) -> None:
        acl = read_acl(path)
        if set(acl.users()) == uids and all(p == RW for p in acl.users().values()):
            return
        for uid in set(acl.users()) - uids:
            acl = acl.with_user(uid, None)
        for uid in uids:
            acl = acl.with_user(uid, RW)
        write_acl(path, acl)
