"""Helpers for the tests of GPU use without a lease: real processes of real users, and the
recorded NVML machine told (through its live file) that they run on its GPUs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpulease import Client

from tests.harness import DaemonPaths, wait_for
from tests.system_users import SystemUsers, open_to_everyone

GIB = 2**30
MACHINE = "dgx-a100-mig"
# GPUs 0-6 whole, GPU 7 in MIG mode (instances gi 2, 3, 9); GPU 0 carries the sample marks
FIRST_GPU = "GPU-838b9f62-4862-589c-b545-4ae61c92f8ff"
AS_XORG = "import os; print('ready', flush=True); os.execv('/bin/sleep', ['Xorg', '600'])"
SLEEPER = "import time; print('ready', flush=True); time.sleep(600)"
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(600)"
)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


class Node:
    """The live file of a recorded machine, and the user processes a test starts."""

    def __init__(self, users: SystemUsers, paths: DaemonPaths) -> None:
        self.users = users
        self.paths = paths
        self.live = paths.root / "live.json"
        self.live.write_text("{}")
        self.pids: list[int] = []
        self._processes: list[subprocess.Popen[str]] = []
        self._on: dict[str, list[dict[str, Any]]] = {}
        self._mark = 0

    @property
    def inventory(self) -> str:
        return f"nvml-recording:{MACHINE}?live={self.live}"

    def start(self, user: str, code: str = SLEEPER) -> int:
        """A process of `user` (python -c CODE), once it printed `ready`; its pid."""
        log = self.paths.root / f"proc-{len(self.pids)}.log"
        process = self.users.start(user, ["-c", code], log)
        self._processes.append(process)
        self.pids.append(process.pid)
        wait_for(lambda: "ready" in log.read_text(), timeout=30, what="the process")
        return process.pid

    def put(self, uuid: str, pid: int, **placement: int) -> None:
        """Tell the machine that `pid` now runs on `uuid` (1 GiB), where `placement` gives a
        MIG process its gpu_instance_id and compute_instance_id."""
        self._on.setdefault(uuid, []).append({"pid": pid, "used_memory_bytes": GIB, **placement})
        self._write()

    def clear(self) -> None:
        self._on.clear()
        self._write()

    def sampled(self, client: Client) -> None:
        """Return once the daemon has adopted two samples taken after this call (so what
        follows the first of them, the check of unleased use, has run)."""
        for _ in range(2):
            self._mark = self._mark % 99 + 1
            self._write()
            mark = self._mark

            def seen(mark: int = mark) -> bool:
                return client.status()[0].raw["utilization_percent"] == mark

            wait_for(seen, timeout=30, what="a sample")

    def _write(self) -> None:
        content: dict[str, Any] = {uuid: {"processes": p} for uuid, p in self._on.items()}
        first = content.setdefault(FIRST_GPU, {})
        first["utilization_gpu_percent"] = self._mark
        tmp = self.live.with_suffix(".tmp")
        tmp.write_text(json.dumps(content))
        os.replace(tmp, self.live)

    def stop_all(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)


@pytest.fixture
def node(system_users: SystemUsers, paths: DaemonPaths) -> Iterator[Node]:
    open_to_everyone(paths.root)
    found = Node(system_users, paths)
    yield found
    found.stop_all()


def exec_code(program: str, *args: str) -> str:
    """Code that says `ready` and then runs `program` in its place (the pid stays)."""
    argv = [program, *args]
    return f"import os; print('ready', flush=True); os.execv({program!r}, {argv!r})"


def ran(pid: int) -> None:
    """Return once `pid` no longer runs Python (it has exec'd, or renamed itself)."""
    wait_for(
        lambda: not Path(f"/proc/{pid}/comm").read_text().startswith("python"),
        timeout=30,
        what=f"pid {pid} to run its program",
    )


@pytest.fixture
def root_xorg() -> Iterator[str]:
    """A copy of `sleep` named `Xorg` where only root can have put it: a root-owned file
    (0755) in a root-owned directory (0755) of /tmp (root's, sticky)."""
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("a program of root's takes root to install")
    directory = tempfile.mkdtemp(prefix="ga-bin-", dir="/tmp")
    os.chmod(directory, 0o755)
    program = os.path.join(directory, "Xorg")
    shutil.copy(shutil.which("sleep") or "/bin/sleep", program)
    os.chmod(program, 0o755)
    yield program
    shutil.rmtree(directory, ignore_errors=True)


NATIVE = Path(__file__).resolve().parent / "native"


@dataclass(frozen=True)
class UserLibraries:
    """bob's directory, with his library (`plain`), the one that hides its LD_PRELOAD entry
    (`hiding`) and his program that passes itself off as another file (`exe_swap`), all
    built from tests/native/."""

    directory: Path
    plain: Path
    hiding: Path
    exe_swap: Path


@pytest.fixture
def bobs_libraries(paths: DaemonPaths, system_users: SystemUsers) -> UserLibraries:
    """bob's shared libraries and program, compiled here, in a directory of his."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build a user's shared library")
    open_to_everyone(paths.root)
    directory = paths.root / "bobs-lib"
    directory.mkdir()
    built = UserLibraries(
        directory, directory / "libmine.so", directory / "libhide.so", directory / "exe_swap"
    )
    library, program = NATIVE / "user_library.c", NATIVE / "exe_swap.c"
    for target, command in (
        (built.plain, ["-shared", "-fPIC", str(library)]),
        (built.hiding, ["-shared", "-fPIC", "-DHIDE", str(library)]),
        (built.exe_swap, ["-O2", "-fno-stack-protector", str(program)]),
    ):
        subprocess.run([cc, *command, "-o", str(target)], check=True)
    uid = system_users.uid("bob")
    for path in (directory, built.plain, built.hiding, built.exe_swap):
        os.chown(path, uid, uid)
    return built


def exec_with(program: str, argv: list[str], environ: list[str]) -> str:
    """Code that says `ready` and runs `program` in its place with exactly `environ` (a list:
    a name may be there twice, as execve(2) allows)."""
    return (
        "import ctypes\n"
        "def array(items):\n"
        "    found = (ctypes.c_char_p * (len(items) + 1))(*[i.encode() for i in items])\n"
        "    found[len(items)] = None\n"
        "    return found\n"
        "print('ready', flush=True)\n"
        f"ctypes.CDLL(None, use_errno=True).execve({program!r}.encode(), "
        f"array({argv!r}), array({environ!r}))\n"
        "raise SystemExit(f'execve: {ctypes.get_errno()}')\n"
    )
