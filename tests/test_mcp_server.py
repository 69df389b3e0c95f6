"""`gpuallocctl mcp`: an agent's tool calls reach the daemon as the kernel-verified user who
runs the server, with that user's rights and limits; errors are tool errors with the
daemon's codes; a waiting allocate reports progress and can be cancelled; a lease an agent
takes ends with the server's process unless kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from tests.harness import DaemonPaths, ThreadDaemon, ctl_argv, wait_for
from tests.mcp_session import data, error, mcp_session
from tests.mcp_transcript import transcript
from tests.rules_harness import daemon_with_config
from tests.system_users import SystemUsers, open_to_everyone

READ_TOOLS = {
    "gpus",
    "my_leases",
    "queue",
    "my_usage",
    "my_limits",
    "reservations",
    "lease_history",
    "export_env",
    "preview_allocation",
}
ACT_TOOLS = {"allocate", "renew", "free"}
ADMIN_TOOLS = {"drain", "undrain", "revoke"}


@pytest.fixture
def node(system_users: SystemUsers, short_dir: Path, paths: DaemonPaths) -> Iterator[ThreadDaemon]:
    """A daemon with limits (students: 2 GPUs at once) and gpuadmin as admins, its socket
    open to the test users."""
    users = system_users
    open_to_everyone(short_dir)
    text = (
        f'admin_groups = ["{users.name("gpuadmin")}"]\n'
        f"[limits.group.{users.name('students')}]\nmax_gpus = 2\n"
    )
    daemon = daemon_with_config(paths, text, default_policy="simple").start()
    yield daemon
    daemon.stop()


def active_leases(daemon: ThreadDaemon) -> list[dict[str, Any]]:
    with daemon.client() as client:
        leases: list[dict[str, Any]] = client.request("GET", "/v1/leases")["leases"]
        return leases


def test_tools_are_listed_with_schemas_and_annotations(
    system_users: SystemUsers, node: ThreadDaemon
) -> None:
    """alice sees the read, preview and act tools, each with a description, an object schema
    that refuses unknown arguments and MCP's annotations; no admin tool."""

    async def main() -> None:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(tools) == READ_TOOLS | ACT_TOOLS
            for tool in tools.values():
                assert tool.description and len(tool.description) > 40
                assert tool.input_schema["type"] == "object"
                assert tool.input_schema["additionalProperties"] is False
                assert tool.annotations is not None
                assert tool.annotations.read_only_hint == (tool.name in READ_TOOLS)
            assert tools["free"].annotations.destructive_hint is True  # type: ignore[union-attr]
            assert tools["allocate"].annotations.idempotent_hint is False  # type: ignore[union-attr]
            allocate = tools["allocate"].input_schema["properties"]
            assert {"count", "gpus", "memory", "mig_profile", "ttl_seconds", "label"} <= set(
                allocate
            )
            assert {"wait", "wait_timeout_seconds", "keep"} <= set(allocate)
            assert tools["lease_history"].input_schema["required"] == ["lease_id"]
            refused = await session.call_tool("gpus", {"colour": "red"})
            assert error(refused)["code"] == "invalid_request"
            refused = await session.call_tool("allocate", {"count": "two"})
            assert error(refused)["details"]["field"] == "count"

    anyio.run(main)


def test_alices_allocate_is_hers_and_refused_past_her_limit(
    system_users: SystemUsers, node: ThreadDaemon
) -> None:
    """An agent's lease is owned by the user who runs the server (as `gpuallocctl leases`
    shows); a request past her max_gpus is a tool error with the quota's code and message;
    export_env gives the lease's GPUs."""
    alice = system_users.name("alice")

    async def main() -> str:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            granted = data(await session.call_tool("allocate", {"count": 2, "label": "agent"}))
            assert granted["owner"] == alice and granted["ends_with_this_session"] is True
            listed = subprocess.run(
                ctl_argv(node.paths.socket, "--json", "leases"), capture_output=True, text=True
            )
            owners = {
                lease["id"]: lease["owner"]["user"] for lease in json.loads(listed.stdout)["leases"]
            }
            assert owners == {granted["id"]: alice}
            refused = error(await session.call_tool("allocate", {"count": 1}))
            assert refused["code"] == "quota_exceeded"
            assert "max_gpus = 2" in refused["message"]
            assert refused["details"] == {"limit": "max_gpus", "value": 2, "current": 2}
            env = data(await session.call_tool("export_env", {"lease_id": granted["id"]}))
            uuids = ",".join(gpu["uuid"] for gpu in granted["gpus"])
            assert env["env"]["CUDA_VISIBLE_DEVICES"] == uuids
            limits = data(await session.call_tool("my_limits", {}))
            max_gpus = next(e for e in limits["limits"] if e["limit"] == "max_gpus")
            assert (max_gpus["value"], max_gpus["remaining"]) == (2, 0)
            return str(granted["id"])

    anyio.run(main)
    # Bound to the server: gone with the session, once the daemon has seen the server exit.
    wait_for(lambda: active_leases(node) == [], 30, what="the session's lease ended")
    assert active_leases(node) == []


def test_bob_may_not_free_or_export_alices_lease(
    system_users: SystemUsers, node: ThreadDaemon
) -> None:
    """bob's agent gets permission_denied for alice's lease, which stays active."""

    async def main() -> None:
        async with mcp_session(system_users, "alice", node.paths.socket) as alices:
            lease = data(await alices.call_tool("allocate", {"count": 1}))
            async with mcp_session(system_users, "bob", node.paths.socket) as bobs:
                refused = error(await bobs.call_tool("free", {"lease_id": lease["id"]}))
                assert refused["code"] == "permission_denied"
                refused = error(await bobs.call_tool("export_env", {"lease_id": lease["id"]}))
                assert refused["code"] == "permission_denied"
                refused = error(await bobs.call_tool("revoke", {"lease_id": lease["id"]}))
                assert refused["code"] == "permission_denied"
            assert [held["id"] for held in active_leases(node)] == [lease["id"]]
            freed = data(await alices.call_tool("free", {"lease_id": lease["id"]}))
            assert freed["state"] == "freed"

    anyio.run(main)


def test_a_waiting_allocate_reports_progress_and_leaves_the_queue_when_cancelled(
    system_users: SystemUsers, node: ThreadDaemon
) -> None:
    """With every GPU taken, alice's waiting allocate reports its place in the queue as
    progress; cancelling the call removes her request from the queue, and nothing is leased
    to her."""
    with node.client() as root:
        held = root.allocate(4)
    progress: list[tuple[float, str | None]] = []

    async def main() -> None:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            reported = anyio.Event()

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append((value, message))
                if message and message.startswith("queued"):
                    reported.set()

            async def call() -> None:
                await session.call_tool(
                    "allocate", {"count": 1, "wait": True}, progress_callback=on_progress
                )

            async with anyio.create_task_group() as group:
                group.start_soon(call)
                with anyio.fail_after(30):
                    await reported.wait()
                group.cancel_scope.cancel()
            with node.client() as client:
                wait_for(lambda: client.queue() == [], 10, what="the request left the queue")
            # the server is still there, and answers
            assert data(await session.call_tool("queue", {}))["waiters"] == []

    anyio.run(main)
    shown = [message for _, message in progress if message and message.startswith("queued")]
    assert shown[0].startswith("queued 1 of 1 (")  # the waiting line's words, as the CLI's
    assert "): Resources: wants 1 GPU(s); 0 free" in shown[0]
    assert [value for value, _ in progress] == sorted(value for value, _ in progress)
    assert [lease["id"] for lease in active_leases(node)] == [held.id]


def test_a_lease_ends_with_the_servers_process_unless_kept(
    system_users: SystemUsers, node: ThreadDaemon
) -> None:
    """kill -9 of the MCP server ends the lease its agent took, not the one it kept."""

    async def main() -> tuple[str, str, int]:
        async with mcp_session(system_users, "alice", node.paths.socket) as session:
            bound = data(await session.call_tool("allocate", {"count": 1}))
            kept = data(await session.call_tool("allocate", {"count": 1, "keep": True}))
            assert (bound["bound_to_process"], kept["bound_to_process"]) == (True, False)
            pid = next(a["pid"] for a in active_leases(node) if a["id"] == bound["id"])
            os.kill(pid, signal.SIGKILL)
            with node.client() as client:
                wait_for(
                    lambda: client.lease(bound["id"]).state != "active",
                    20,
                    what="the bound lease ended",
                )
                assert client.lease(kept["id"]).state == "active"
            return bound["id"], kept["id"], pid

    bound, kept, pid = anyio.run(main)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with node.client() as client:
        assert client.lease(bound).state == "freed"
        assert [lease.id for lease in client.leases()] == [kept]


def test_admin_tools_are_absent_for_alice_and_work_for_an_admin(
    system_users: SystemUsers, node: ThreadDaemon
) -> None:
    """dave (gpuadmin) sees drain, undrain and revoke, and they act; alice does not see
    them, and calling one anyway is refused by the daemon."""

    async def main() -> None:
        socket = node.paths.socket
        async with mcp_session(system_users, "alice", socket) as alices:
            names = {tool.name for tool in (await alices.list_tools()).tools}
            assert names.isdisjoint(ADMIN_TOOLS)
            refused = error(await alices.call_tool("drain", {"gpus": [3], "reason": "mine"}))
            assert refused["code"] == "permission_denied"
            lease = data(await alices.call_tool("allocate", {"count": 1, "label": "train"}))
            async with mcp_session(system_users, "dave", socket) as daves:
                names = {tool.name for tool in (await daves.list_tools()).tools}
                assert names >= ADMIN_TOOLS
                drained = data(await daves.call_tool("drain", {"gpus": [3], "reason": "fan"}))
                assert [g["state"] for g in drained["gpus"]] == ["drained"]
                undrained = data(await daves.call_tool("undrain", {"gpus": [3]}))
                assert [g["state"] for g in undrained["gpus"]] == ["free"]
                revoked = data(
                    await daves.call_tool("revoke", {"lease_id": lease["id"], "reason": "x"})
                )
                assert revoked["state"] == "revoked"
            history = data(await alices.call_tool("lease_history", {"lease_id": lease["id"]}))
            assert [e["event"] for e in history["events"]] == ["granted", "revoked"]

    anyio.run(main)


def test_preview_says_where_now_or_when_and_why_not_sooner(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """On the live node: a request that fits gets the policy's choice; one that does not
    gets the reason, the leases it would wait for and an estimated start; nothing changes."""
    daemon = start_daemon(default_policy="simple")
    with daemon.client() as client:
        held = client.allocate_specific([0, 1, 2], ttl=600, label="sweep")

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with mcp_session(None, "", daemon.paths.socket) as session:
            fits = data(await session.call_tool("preview_allocation", {"count": 1}))
            waits = data(await session.call_tool("preview_allocation", {"count": 2}))
            return fits, waits

    fits, waits = anyio.run(main)
    assert fits["now"]["gpus"] == [3] and fits["outcome"] == "granted"
    assert waits["now"] is None and waits["why_not_now"]["code"] == "gpus_unavailable"
    assert 590 <= waits["estimated_start_in_seconds"] <= 600
    assert [(w["gpu"], w["label"]) for w in waits["waiting_for"]] == [(0, "sweep")]
    with daemon.client() as client:
        assert [lease.id for lease in client.leases()] == [held.id]


def test_preview_says_what_allocate_would_do_under_the_daemons_rules(
    paths: DaemonPaths,
) -> None:
    """Under a `default_policy` of `spread` and a `max_ttl_seconds` of 10 minutes, the
    preview picks the GPUs allocate then gets, and refuses a TTL allocate refuses, with its
    code; a drained GPU named is refused as allocate refuses it."""
    config = "[limits]\nmax_ttl_seconds = 600\n"
    daemon = daemon_with_config(paths, config, default_policy="spread").start()
    try:
        with daemon.client() as client:
            client.allocate_specific([0], ttl=600)
            client.drain([3], "fan")

        async def main() -> None:
            async with mcp_session(None, "", daemon.paths.socket) as session:
                fits = data(await session.call_tool("preview_allocation", {"count": 2}))
                lease = data(await session.call_tool("allocate", {"count": 2, "keep": True}))
                assert fits["now"]["policy"] == "spread"
                assert fits["now"]["gpus"] == [g["index"] for g in lease["gpus"]]
                asked = {"count": 1, "ttl_seconds": 3600}
                long = data(await session.call_tool("preview_allocation", asked))
                refused = error(await session.call_tool("allocate", asked))
                assert long["now"] is None
                assert long["why_not_now"]["code"] == refused["code"] == "quota_exceeded"
                drained = data(await session.call_tool("preview_allocation", {"gpus": [3]}))
                busy = error(await session.call_tool("allocate", {"gpus": [3]}))
                assert drained["why_not_now"]["code"] == busy["code"]

        anyio.run(main)
    finally:
        daemon.stop()


def test_a_daemon_restart_mid_session_is_survived(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """While the daemon is down a call is a daemon_unavailable tool error and the server
    stays up; once it is back, the next call connects again and the kept lease is there."""
    first = start_daemon(default_policy="simple")

    async def main() -> None:
        async with mcp_session(None, "", first.paths.socket) as session:
            kept = data(await session.call_tool("allocate", {"count": 1, "keep": True}))
            first.stop()
            down = error(await session.call_tool("gpus", {}))
            assert down["code"] == "daemon_unavailable"
            start_daemon(default_policy="simple")
            leases = data(await session.call_tool("my_leases", {}))["leases"]
            assert [lease["id"] for lease in leases] == [kept["id"]]
            renewed = data(await session.call_tool("renew", {"lease_id": kept["id"]}))
            assert renewed["state"] == "active"
            data(await session.call_tool("free", {"lease_id": kept["id"]}))

    anyio.run(main)


def test_an_agent_style_session_lists_previews_allocates_and_frees(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """The transcript of docs/agents.md runs: every step answers, and nothing stays leased."""
    daemon = start_daemon(default_policy="best-effort")
    lines = anyio.run(transcript, daemon.paths.socket)
    assert not any("(error)" in line for line in lines)
    assert any(line.startswith("> preview_allocation") and "fits now" in line for line in lines)
    (freed,) = [line for line in lines if line.startswith('> free {"lease_id"')]
    assert "freed" in freed
    assert any(line.startswith("> my_usage {}\nyour use in the last 7d") for line in lines)
    with daemon.client() as client:
        assert client.leases() == []


def test_a_wait_that_times_out_is_a_tool_error_and_leaves_nothing_queued(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """wait_timeout_seconds ends the wait with gpus_unavailable and how long it waited."""
    daemon = start_daemon(default_policy="simple")
    with daemon.client() as client:
        client.allocate(4)

    async def main() -> dict[str, Any]:
        async with mcp_session(None, "", daemon.paths.socket) as session:
            arguments = {"count": 1, "wait": True, "wait_timeout_seconds": 0.5}
            return error(await session.call_tool("allocate", arguments))

    refused = anyio.run(main)
    assert refused["code"] == "gpus_unavailable"
    assert refused["details"]["waited_seconds"] > 0
    with daemon.client() as client:
        assert client.queue() == []


def test_the_read_tools_show_the_queue_reservations_and_usage(
    start_daemon: Callable[..., ThreadDaemon],
) -> None:
    """queue marks whose each waiter is; reservations lists the admin's; my_usage counts the
    caller's leases in the window; my_leases only the caller's."""
    daemon = start_daemon(default_policy="simple")
    with daemon.client() as client:
        reservation = client.reserve(
            count=1, start_in=3600, duration=600, user="root", reason="demo"
        )
        held = client.allocate(3, ttl=600)
        client.free(client.allocate(1).id)

    async def main() -> tuple[dict[str, Any], ...]:
        async with mcp_session(None, "", daemon.paths.socket) as session:
            async with anyio.create_task_group() as group:
                arguments = {"count": 4, "wait": True, "label": "big"}
                group.start_soon(session.call_tool, "allocate", arguments)
                with daemon.client() as client:
                    await anyio.to_thread.run_sync(
                        lambda: wait_for(lambda: len(client.queue()) == 1, 20, what="queued")
                    )
                queue = data(await session.call_tool("queue", {}))
                group.cancel_scope.cancel()
            reservations = data(await session.call_tool("reservations", {}))
            usage = data(await session.call_tool("my_usage", {"hours": 1}))
            leases = data(await session.call_tool("my_leases", {}))
            return queue, reservations, usage, leases

    queue, reservations, usage, leases = anyio.run(main)
    assert [(w["label"], w["mine"], w["reason"]) for w in queue["waiters"]] == [
        ("big", True, "Resources")
    ]
    assert [r["id"] for r in reservations["reservations"]] == [reservation["id"]]
    assert usage["leases"] == 2
    assert [lease["id"] for lease in leases["leases"]] == [held.id]
    assert leases["leases"][0]["ends_with_this_session"] is False
