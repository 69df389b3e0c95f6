"""systemd's manager on the system bus, through `busctl` (which ships with systemd wherever
the scope mode applies): start a lease's transient scope, and signal it.

A method call is one short-lived `busctl call`, run without blocking the event loop; root
may call these methods without polkit. `busctl` over a D-Bus library: no new dependency, and
the few calls a lease makes (one at grant, one at a revoke's end) cost a few milliseconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
from collections.abc import Sequence

__all__ = ["BusError", "bus_problem", "kill_unit", "start_scope"]

log = logging.getLogger(__name__)

DESTINATION = ("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
MANAGER = "org.freedesktop.systemd1.Manager"
CALL_SECONDS = 10.0
PRIVATE = (
    "NOTIFY_SOCKET",
    "WATCHDOG_PID",
    "WATCHDOG_USEC",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
)


class BusError(Exception):
    """A call to systemd failed: its message."""


def _busctl() -> str:
    found = shutil.which("busctl")
    if found is None:
        raise BusError("busctl is not installed")
    return found


def _argv(method: str, signature: str, *args: str) -> list[str]:
    return [_busctl(), "call", "--quiet", *DESTINATION, MANAGER, method, signature, *args]


def _environment() -> dict[str, str]:
    """The daemon's environment less what systemd gave the daemon alone: systemd's tools
    report a failure to $NOTIFY_SOCKET, which the service manager refuses (and logs) from
    any process but the daemon's."""
    return {k: v for k, v in os.environ.items() if k not in PRIVATE}


async def _call(method: str, signature: str, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        *_argv(method, signature, *args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environment(),
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), CALL_SECONDS)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        raise BusError(f"{method}: systemd did not answer in {CALL_SECONDS:g} s") from None
    if process.returncode != 0:
        raise BusError(f"{method}: {err.decode(errors='replace').strip()}")
    return out.decode(errors="replace").strip()


async def start_scope(name: str, slice_unit: str, pids: Sequence[int], description: str) -> None:
    """Start the transient scope `name` in `slice_unit` with `pids` moved into it (the job
    is queued when this returns; systemd moves the processes when it runs)."""
    await _call(
        "StartTransientUnit",
        "ssa(sv)a(sa(sv))",
        name,
        "fail",
        "3",
        "PIDs",
        "au",
        str(len(pids)),
        *map(str, pids),
        "Slice",
        "s",
        slice_unit,
        "Description",
        "s",
        description,
        "0",
    )


async def kill_unit(name: str, signal: int) -> None:
    """`signal` to every process of the unit: systemd reads its cgroup again and again until
    no process it has not signalled is left, so a fork racing the kill is caught too."""
    await _call("KillUnit", "ssi", name, "all", str(signal))


def bus_problem() -> str | None:
    """Why systemd's manager cannot be asked for scopes here; None if it answers."""
    try:
        argv = [_busctl(), "get-property", *DESTINATION, MANAGER, "Version"]
    except BusError as exc:
        return str(exc)
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=CALL_SECONDS, env=_environment()
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"busctl failed: {exc}"
    if done.returncode != 0:
        return f"systemd's bus does not answer: {done.stderr.strip() or done.returncode}"
    return None
