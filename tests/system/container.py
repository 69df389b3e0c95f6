"""A Debian bookworm system booted by systemd-nspawn, with systemd 252 as its PID 1.

The root file system is built once with debootstrap and kept (`cache_dir()`, keyed by what it
holds); each boot runs on a throw-away overlay of it (`--volatile=overlay`), so a run never
changes the cached tree. The container shares the host's network (metrics on 127.0.0.1 are
reachable from both sides) and runs on the unified cgroup hierarchy. Commands enter it with
`nsenter`; `systemd-run` inside starts them as units of its systemd (as users log in).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["Box", "build_root", "cache_dir", "nspawn_problem", "wheelhouse"]

SUITE = "bookworm"
MIRROR = os.environ.get("GPUALLOCD_SYSTEM_TEST_MIRROR", "http://deb.debian.org/debian")
PACKAGES = ("systemd", "systemd-sysv", "dbus", "python3", "python3-venv", "procps")
NSPAWN_PROPAGATE = Path("/run/systemd/nspawn")
BOOT_SECONDS = 120


def cache_dir() -> Path:
    """Where built trees and wheels are kept between runs."""
    return Path(os.environ.get("GPUALLOCD_SYSTEM_TEST_CACHE", "/var/cache/gpuallocd-system-test"))


def nspawn_problem() -> str | None:
    """Why a container cannot be booted here; None if it can."""
    if os.geteuid() != 0:
        return "booting a container needs root"
    missing = [c for c in ("systemd-nspawn", "debootstrap", "nsenter") if shutil.which(c) is None]
    if missing:
        return (
            f"not installed: {', '.join(missing)} (apt-get install systemd-container debootstrap)"
        )
    return None


def _run(argv: Sequence[str], timeout: float, **options: object) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **options)  # type: ignore[call-overload]
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stderr[-2000:]}")


def _remove_tree(tree: Path) -> None:
    """Remove a cut-off debootstrap's tree: first what it left mounted inside (its /proc),
    deepest first, so that nothing is deleted through a mount."""
    inside = str(tree.resolve()) + "/"
    mounts = [
        line.split(" ")[1]
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split(" ")[1].startswith(inside)
    ]
    for point in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], check=False)
    shutil.rmtree(tree, ignore_errors=True)


def build_root() -> Path:
    """The cached root file system, built by debootstrap on first use (about a minute)."""
    key = hashlib.sha256(f"{SUITE} {' '.join(PACKAGES)}".encode()).hexdigest()[:12]
    root = cache_dir() / f"root-{SUITE}-{key}"
    if (root / "usr" / "lib" / "systemd" / "systemd").exists():
        return root
    for stale in root.parent.glob(f"{root.name}.building-*"):  # a build cut off earlier
        _remove_tree(stale)
    building = root.with_name(root.name + f".building-{os.getpid()}")
    building.parent.mkdir(parents=True, exist_ok=True)
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            SUITE,
            str(building),
            MIRROR,
        ],
        timeout=900,
    )
    (building / "etc" / "hostname").write_text("gpubox\n")
    building.rename(root)
    return root


def wheelhouse(requirements: Sequence[str]) -> Path:
    """Wheels of the project's dependencies (and its build backend), downloaded once per
    set of requirements, so that `pip install .` in the container needs no network."""
    key = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()[:12]
    wheels = cache_dir() / f"wheels-{key}"
    if (wheels / ".complete").exists():
        return wheels
    wheels.mkdir(parents=True, exist_ok=True)
    _run(
        [
            "python3",
            "-m",
            "pip",
            "download",
            "--quiet",
            "--only-binary=:all:",
            "--dest",
            str(wheels),
            *requirements,
        ],
        timeout=600,
        env={k: v for k, v in os.environ.items() if not k.startswith("PIP_CONSTRAINT")},
    )
    (wheels / ".complete").write_text("")
    return wheels


def _prepare_host() -> None:
    """systemd-nspawn keeps per-machine state under /run/systemd/nspawn and refuses to clean
    it up unless it is a tmpfs; where /run is not one (no systemd on the host), mount one."""
    NSPAWN_PROPAGATE.mkdir(parents=True, exist_ok=True)
    mounts = Path("/proc/self/mounts").read_text().split("\n")
    if not any(line.split(" ")[1:2] == [str(NSPAWN_PROPAGATE)] for line in mounts if line):
        _run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(NSPAWN_PROPAGATE)], 30)


class Box:
    """One booted container: `run` a command in it, `stop` it."""

    def __init__(self, root: Path, name: str, binds: Sequence[tuple[Path, str, bool]], log: Path):
        """`binds`: (host path, path inside, read-only)."""
        self.name = name
        self.log = log
        _prepare_host()
        options = [f"--bind{'-ro' if ro else ''}={host}:{inside}" for host, inside, ro in binds]
        command = [
            "systemd-nspawn",
            "--boot",
            f"--directory={root}",
            "--volatile=overlay",
            f"--machine={name}",
            "--register=no",
            "--keep-unit",
            "--console=pipe",
            *options,
        ]
        env = {**os.environ, "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
        with open(log, "w") as out:
            self._nspawn = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        try:
            self.leader = self._wait_for_leader()
            self._wait_until_running()
        except BaseException:
            self.stop()
            raise

    def _wait_for_leader(self) -> int:
        deadline = time.monotonic() + BOOT_SECONDS
        while time.monotonic() < deadline:
            if self._nspawn.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited: {self.log.read_text()[-2000:]}")
            children = Path(f"/proc/{self._nspawn.pid}/task/{self._nspawn.pid}/children")
            for pid in children.read_text().split():
                if Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
                    return int(pid)
            time.sleep(0.1)
        raise RuntimeError("the container's systemd did not start")

    def _wait_until_running(self) -> None:
        """Until boot is over (its systemd answers on its bus only a moment after it starts)."""
        deadline = time.monotonic() + BOOT_SECONDS
        while True:
            state = self.run(["systemctl", "is-system-running", "--wait"], timeout=BOOT_SECONDS)
            if state.stdout.strip() in ("running", "degraded"):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the container did not boot: {state.stdout} {state.stderr}")
            time.sleep(0.2)

    def run(
        self, argv: Sequence[str], *, timeout: float = 120, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside as root (its namespaces; not a unit of its systemd)."""
        return subprocess.run(
            ["nsenter", "--all", f"--target={self.leader}", "--", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8"},
        )

    def sh(self, script: str, *, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run(["sh", "-c", script], timeout=timeout)

    def as_user(
        self, user: str, argv: Sequence[str], *, timeout: float = 120, unit: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a command as `user`, as a unit of the container's systemd: waited for and its
        output returned, or (with `unit`) started in the background under that unit name."""
        if unit is None:
            options = ["--pipe", "--wait", "--quiet", "--collect"]
        else:  # kept after it ends, so that its exit status can be read
            options = [f"--unit={unit}", "--quiet"]
        return self.run(
            [
                "systemd-run",
                *options,
                "-p",
                f"User={user}",
                "-p",
                "WorkingDirectory=~",
                "--",
                *argv,
            ],
            timeout=timeout,
        )

    def stop(self) -> None:
        if self._nspawn.poll() is None:
            self._nspawn.send_signal(signal.SIGTERM)  # nspawn asks the container to halt
            try:
                self._nspawn.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self._nspawn.pid, signal.SIGKILL)
                self._nspawn.wait(30)
