"""Where a lease's scope lives in the cgroup v2 tree, and what its files say.

A transient scope `gpuallocd-lease-ID.scope` in the slice `gpuallocd-leases.slice` is, by
systemd's naming, the cgroup `gpuallocd.slice/gpuallocd-leases.slice/gpuallocd-lease-ID.scope`
below the root of the unified hierarchy: a dash in a slice's name makes it a child of the
slice named by what comes before the dash. A lease that follows its work past its holder
(`following.py`), or that a process joined, has a second scope for that work,
`gpuallocd-lease-ID-work.scope`: a new unit, never one systemd may still be removing.
Pure functions of names and file contents, and the two reads the tracking needs
(`cgroup.procs`, `cgroup.events`).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CGROUP_ROOT",
    "LEASES_SLICE",
    "in_slice",
    "lease_of_scope",
    "parse_proc_cgroup",
    "populated",
    "procs",
    "scope_dir",
    "scope_name",
    "slice_path",
]

CGROUP_ROOT = Path("/sys/fs/cgroup")
LEASES_SLICE = "gpuallocd-leases.slice"
SCOPE_PREFIX = "gpuallocd-lease-"
WORK_SUFFIX = "-work"


def scope_name(lease_id: str, work: bool = False) -> str:
    """The scope unit of a lease, or of its work (lease ids are hex: valid in a unit name
    as they are)."""
    if not lease_id or not all(c.isalnum() or c == "_" for c in lease_id):
        raise ValueError(f"not a lease id fit for a unit name: {lease_id!r}")
    return f"{SCOPE_PREFIX}{lease_id}{WORK_SUFFIX if work else ''}.scope"


def lease_of_scope(unit: str) -> str | None:
    """The lease a scope unit is named for (its own or its work's); None for any other."""
    if not unit.startswith(SCOPE_PREFIX) or not unit.endswith(".scope"):
        return None
    stem = unit.removeprefix(SCOPE_PREFIX).removesuffix(".scope")
    return stem.removesuffix(WORK_SUFFIX) or None


def slice_path(slice_unit: str) -> str:
    """The cgroup of a slice unit, relative to the hierarchy's root: `a-b.slice` is
    `a.slice/a-b.slice`; `-.slice` is the root itself."""
    if not slice_unit.endswith(".slice"):
        raise ValueError(f"not a slice unit: {slice_unit!r}")
    stem = slice_unit.removesuffix(".slice")
    if stem == "-":
        return ""
    if not stem or stem.startswith("-") or stem.endswith("-") or "--" in stem:
        raise ValueError(f"not a valid slice name: {slice_unit!r}")
    parts = stem.split("-")
    return "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


def scope_dir(
    lease_id: str, root: Path = CGROUP_ROOT, slice_unit: str = LEASES_SLICE, work: bool = False
) -> Path:
    """The cgroup directory of a lease's scope (or of its work's)."""
    return root / slice_path(slice_unit) / scope_name(lease_id, work)


def in_slice(cgroup: str, slice_unit: str = LEASES_SLICE) -> bool:
    """Whether a cgroup path (as /proc/PID/cgroup gives it) lies inside the slice."""
    return cgroup.startswith(f"/{slice_path(slice_unit)}/")


def parse_proc_cgroup(text: str) -> str | None:
    """The unified hierarchy's path in a /proc/PID/cgroup text (the `0::PATH` line), or
    None where there is none (a v1-only host)."""
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def procs(cgroup: Path) -> list[int]:
    """The processes in a cgroup now (not its children's: a scope has none); empty if the
    cgroup is gone."""
    try:
        return [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def populated(cgroup: Path) -> bool:
    """Whether any process is in the cgroup or below it (`cgroup.events`); a cgroup that
    is gone is empty."""
    try:
        text = (cgroup / "cgroup.events").read_text()
    except OSError:
        return False
    return "populated 1" in text.splitlines()
