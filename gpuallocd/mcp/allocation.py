"""The allocate tool: a lease bound to this server's process unless the agent keeps it, that
follows the agent's work past the session (`follow_work`: the commands the agent started with
its environment keep it), and a wait in the queue that reports progress and leaves the queue
when the call is cancelled.

While a request waits, the queue is read every `POLL_SECONDS` on a connection of its own and
this process's waiter (the daemon knows it by this pid, SO_PEERCRED) is reported as MCP
progress: its position, why it waits and its estimated start. Cancelling the call hangs up the
waiting connection, which makes the daemon drop the request; then the server waits until the
request has left the queue and frees a lease granted in that very moment (its answer would be
lost), as `gpuallocctl allocate --wait` does on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
from gpulease import Client, DaemonUnavailable, GpuallocError, Lease, parse_size

from gpuallocd.errors import InvalidRequest
from gpuallocd.mcp.answers import Answer
from gpuallocd.mcp.calls import Daemon
from gpuallocd.mcp.foreign import OthersText
from gpuallocd.mcp.readable import span, when
from gpuallocd.mcp.shapes import lease_line, lease_view
from gpuallocd.model.queue_text import queued_line

__all__ = ["Progress", "allocate", "allocate_options"]

POLL_SECONDS = 1.0
LEAVE_TIMEOUT_SECONDS = 5.0
# Leases this server has handed to its agent: the cleanup after a cancelled wait never frees
# one of them, whatever its label.
_HANDED_OUT: set[str] = set()

# progress(seconds waited, the wait's limit or None, what the queue says)
Progress = Callable[[float, float | None, str], Awaitable[None]]


def allocate_options(args: dict[str, Any]) -> dict[str, Any]:
    """The tool's arguments as `Client.allocate` keywords (the lease bound unless `keep`)."""
    memory = args.get("memory")
    try:
        memory_bytes = None if memory is None else parse_size(memory)
    except ValueError as exc:
        raise InvalidRequest(str(exc), field="memory", value=memory) from None
    return {
        "count": args.get("count"),
        "gpus": args.get("gpus"),
        "memory_bytes": memory_bytes,
        "mig_profile": args.get("mig_profile"),
        "policy": args.get("policy"),
        "ttl": args.get("ttl_seconds"),
        "label": args.get("label"),
        "wait": bool(args.get("wait", False)),
        "timeout": args.get("wait_timeout_seconds"),
        "bind_to_process": not args.get("keep", False),
        # the agent's commands, started beside this server, keep the lease after it
        "follow_work": not args.get("keep", False),
        "power_limit_watts": args.get("power_limit_watts"),
        "preemptible": bool(args.get("preemptible", False)),
    }


async def allocate(daemon: Daemon, args: dict[str, Any], progress: Progress) -> Answer:
    options = allocate_options(args)
    if not options["wait"]:
        return _granted(await daemon.call(partial(_request, options)), waited=False)
    started = time.time()
    work = partial(_wait, daemon, options, started)
    outcome: Lease | Exception
    async with anyio.create_task_group() as group:
        group.start_soon(_report, daemon, progress, options)
        try:
            outcome = await daemon.call_abortable(work, timeout=None)
        except Exception as exc:  # raised out here, not wrapped in the group's ExceptionGroup
            outcome = exc
        group.cancel_scope.cancel()
    if isinstance(outcome, Exception):
        raise outcome
    return _granted(outcome.raw, waited=True)


def _request(options: dict[str, Any], client: Client) -> dict[str, Any]:
    lease: Lease = client.allocate(**options)
    _HANDED_OUT.add(lease.id)
    return lease.raw


def _granted(raw: dict[str, Any], waited: bool) -> Answer:
    now = time.time()
    view = lease_view(raw, now, OthersText())  # the caller's own lease
    view["waited_seconds"] = round(raw.get("waited_seconds") or 0.0, 1)
    how = f"granted after waiting {span(view['waited_seconds'])}" if waited else "granted"
    text = f"{how}: {lease_line(view, now)}; use export_env for its environment"
    return Answer(text, view)


def _wait(daemon: Daemon, options: dict[str, Any], started: float, client: Client) -> Lease:
    """Runs in a worker thread: the waiting request, and the cleanup after a hang-up."""
    try:
        lease = client.allocate(**options)
    except DaemonUnavailable:
        if client.aborted:
            _leave_queue(daemon, options.get("label"), started)
        raise
    if client.aborted:  # granted as we hung up: nobody will get this answer
        with contextlib.suppress(GpuallocError), daemon.client(timeout=10) as other:
            other.free(lease.id)
    else:
        _HANDED_OUT.add(lease.id)
    return lease


def _is_ours(item: dict[str, Any], label: str | None) -> bool:
    return bool(item.get("pid") == os.getpid() and item.get("label") == label)


def _leave_queue(daemon: Daemon, label: str | None, started: float) -> None:
    """After a hang-up: wait until the daemon has dropped the request; free what it granted."""
    with contextlib.suppress(GpuallocError), daemon.client(timeout=10) as client:
        deadline = time.monotonic() + LEAVE_TIMEOUT_SECONDS
        while any(_is_ours(w, label) for w in client.queue()) and time.monotonic() < deadline:
            time.sleep(0.05)
        for lease in client.request("GET", "/v1/leases")["leases"]:
            late = lease.get("created_at", 0) >= started - 1
            if _is_ours(lease, label) and late and lease["id"] not in _HANDED_OUT:
                client.free(lease["id"])


async def _report(daemon: Daemon, progress: Progress, options: dict[str, Any]) -> None:
    """Report this request's place in the queue until cancelled."""
    began = time.monotonic()
    limit = options.get("timeout")
    while True:
        await anyio.sleep(POLL_SECONDS)
        try:
            waiters = await daemon.call(lambda client: client.queue())
        except GpuallocError as exc:  # a restarting daemon: say so, keep waiting
            text = f"waiting; the queue cannot be read now ({exc.code})"
        else:
            text = _queue_text(waiters, options.get("label"))
        await progress(time.monotonic() - began, limit, text)


def _queue_text(waiters: list[dict[str, Any]], label: str | None) -> str:
    mine = [w for w in waiters if _is_ours(w, label)]
    if not mine:
        return "waiting"
    waiter = mine[0]
    start = waiter.get("estimated_start_at")
    waited = span(waiter.get("waited_seconds") or 0.0)
    ahead = None if start is None else when(start, time.time())
    return queued_line(waiter, len(waiters), waited, ahead)
