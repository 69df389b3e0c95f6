"""systemd's manager on the system bus, through jeepney (a pure-Python D-Bus library): start
a lease's transient scope and wait for it to be started, move more processes into a running
one, and signal a scope.

One connection, opened on first use and again after it drops. A scope's start job is
awaited on systemd's own `JobRemoved` signal (systemd sends it to the client that queued the
job), so `start_scope` returns once the processes are in the scope, with no polling of
/proc. Root may call these methods without polkit.

Why a library: the calls were one `busctl` subprocess each (a fork and exec per lease, a few
milliseconds) and a 5 ms poll of /proc/PID/cgroup until the move showed; jeepney has no
compiled parts and no dependencies, is imported only in the scope mode (about 15 ms), and
hears the job's end from systemd itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

__all__ = ["BusError", "SystemdManager", "bus_problem"]

log = logging.getLogger(__name__)

SYSTEMD = "org.freedesktop.systemd1"
PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
CALL_SECONDS = 10.0
JOB_SECONDS = 5.0  # systemd runs a scope's start job at once; this bounds a busy one


class BusError(Exception):
    """A call to systemd failed: its message."""


def _manager() -> Any:
    from jeepney import DBusAddress

    return DBusAddress(PATH, bus_name=SYSTEMD, interface=MANAGER)


def _job_removed() -> Any:
    from jeepney import MatchRule

    # The bus routes systemd's own signals to us (a well-known name in a match rule stands
    # for its owner); `_job_result` checks the sender again, since anyone may send us one.
    return MatchRule(
        type="signal", sender=SYSTEMD, interface=MANAGER, member="JobRemoved", path=PATH
    )


def _local_job_removed() -> Any:
    """The same rule for the router's own filter, which sees the sender's unique name."""
    from jeepney import MatchRule

    return MatchRule(type="signal", interface=MANAGER, member="JobRemoved", path=PATH)


def _scope_properties(
    slice_unit: str, pids: Sequence[int], description: str, delegate: bool
) -> list[Any]:
    found = [
        ("PIDs", ("au", list(pids))),
        ("Slice", ("s", slice_unit)),
        ("Description", ("s", description)),
    ]
    # systemd moves processes into a running unit only where it is delegated; the cgroup
    # stays root's (the unit has no User=), so no user may write it either way
    return [*found, ("Delegate", ("b", True))] if delegate else found


class SystemdManager:
    """Calls to systemd's manager over one system-bus connection (asyncio)."""

    def __init__(self) -> None:
        self._opened: Any = None  # jeepney's open_dbus_router, entered
        self._router: Any = None
        self._systemd = ""  # systemd's unique name on the bus: the only sender believed
        self._opening = asyncio.Lock()

    async def start_scope(
        self,
        name: str,
        slice_unit: str,
        pids: Sequence[int],
        description: str,
        delegate: bool = False,
    ) -> None:
        """Start the transient scope `name` in `slice_unit` with `pids` moved into it, and
        wait until systemd has run the start job (BusError if it failed or did not end);
        `delegate`: one that `attach` may move more processes into later."""
        from jeepney import new_method_call

        router = await self._connected()
        call = new_method_call(
            _manager(),
            "StartTransientUnit",
            "ssa(sv)a(sa(sv))",
            (name, "fail", _scope_properties(slice_unit, pids, description, delegate), []),
        )
        with router.filter(_local_job_removed(), bufsize=64) as removed:
            (job,) = await self._reply(router, call, "StartTransientUnit")
            try:
                result = await _job_result(removed, job, self._systemd)
            except BusError:
                await self.close()  # systemd may have re-executed under a new name: ask again
                raise
        if result != "done":
            raise BusError(f"the start job of {name} ended {result!r}")

    async def attach(self, name: str, pids: Sequence[int]) -> None:
        """Move `pids` into the running, delegated unit `name` (systemd 238 and later);
        BusError where the unit is gone or refuses them. Done when systemd answers."""
        from jeepney import new_method_call

        router = await self._connected()
        call = new_method_call(_manager(), "AttachProcessesToUnit", "ssau", (name, "", list(pids)))
        await self._reply(router, call, "AttachProcessesToUnit")

    async def kill_unit(self, name: str, signal: int) -> None:
        """`signal` to every process of the unit: systemd reads its cgroup again and again
        until no process it has not signalled is left, so a fork racing the kill is caught."""
        from jeepney import new_method_call

        router = await self._connected()
        call = new_method_call(_manager(), "KillUnit", "ssi", (name, "all", signal))
        await self._reply(router, call, "KillUnit")

    async def close(self) -> None:
        opened, self._opened, self._router = self._opened, None, None
        if opened is not None:
            with contextlib.suppress(Exception):
                await opened.__aexit__(None, None, None)

    async def _connected(self) -> Any:
        async with self._opening:
            if self._router is None:
                self._opened, self._router, self._systemd = await _open_router()
            return self._router

    async def _reply(self, router: Any, call: Any, method: str) -> Any:
        from jeepney import MessageType

        try:
            reply = await asyncio.wait_for(router.send_and_get_reply(call), CALL_SECONDS)
        except asyncio.TimeoutError:
            raise BusError(f"{method}: systemd did not answer in {CALL_SECONDS:g} s") from None
        except Exception as exc:  # the connection dropped: open a new one next time
            await self.close()
            raise BusError(f"{method}: {exc}") from None
        if reply.header.message_type == MessageType.error:
            raise BusError(f"{method}: {' '.join(map(str, reply.body)) or 'error'}")
        return reply.body


async def _open_router() -> tuple[Any, Any, str]:
    """A router on the system bus (and what closes it), told to route systemd's JobRemoved
    signals to us, and systemd's unique name there."""
    from jeepney import message_bus
    from jeepney.io.asyncio import open_dbus_router

    opened = open_dbus_router("SYSTEM")
    try:
        router = await asyncio.wait_for(opened.__aenter__(), CALL_SECONDS)
        await asyncio.wait_for(
            router.send_and_get_reply(message_bus.AddMatch(_job_removed())), CALL_SECONDS
        )
        owner = await asyncio.wait_for(
            router.send_and_get_reply(message_bus.GetNameOwner(SYSTEMD)), CALL_SECONDS
        )
    except (OSError, ValueError, asyncio.TimeoutError) as exc:
        with contextlib.suppress(Exception):
            await opened.__aexit__(None, None, None)
        raise BusError(f"the system bus does not answer: {exc or 'timed out'}") from None
    return opened, router, str(owner.body[0]) if owner.body else ""


async def _job_result(removed: asyncio.Queue[Any], job: str, systemd: str) -> str:
    """The result of `job` from the JobRemoved signals queued since before it was started;
    a signal from anyone but systemd (`systemd`, its unique name) is not believed: a local
    user may send one, to make the daemon think a scope started, or failed."""
    from jeepney import HeaderFields

    loop = asyncio.get_running_loop()
    deadline = loop.time() + JOB_SECONDS
    while True:
        left = deadline - loop.time()
        if left <= 0:
            raise BusError(f"job {job} did not end in {JOB_SECONDS:g} s")
        try:
            signal = await asyncio.wait_for(removed.get(), left)
        except asyncio.TimeoutError:
            continue
        if signal.header.fields.get(HeaderFields.sender) != systemd:
            continue
        _id, path, _unit, result = signal.body
        if path == job:
            return str(result)


def bus_problem() -> str | None:
    """Why systemd's manager cannot be asked for scopes here; None if it answers."""
    try:
        from jeepney import Properties
        from jeepney.io.blocking import open_dbus_connection
    except ImportError:
        return "jeepney is not installed"
    try:
        with open_dbus_connection("SYSTEM") as connection:
            reply = connection.send_and_get_reply(
                Properties(_manager()).get("Version"), timeout=CALL_SECONDS
            )
    except Exception as exc:  # no bus socket, refused, timed out
        return f"systemd's bus does not answer: {exc}"
    if reply.header.message_type.name == "error":
        return f"systemd's bus does not answer: {reply.body}"
    return None
