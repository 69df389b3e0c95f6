"""Every MCP answer reads well to a model: driven by the SDK's own stdio client as the real
user alice, on the recorded DGX-1 whose energy runs on a hand clock, with a price and
budgets. Moments are dates with their zone (ISO 8601 in the JSON), durations read as
durations, figures are rounded with their units, energy comes with its cost and currency,
no `None` and no command-line flag is said, the defaults are the command line's, each answer
is said once (the text is not followed by the JSON), and every tool declares the shape of its
answer. `allocate` takes a power cap and offers the daemon's policies."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.types import CallToolResult

from tests.harness import DaemonPaths
from tests.mcp_session import data, error, mcp_session
from tests.system_users import SystemUsers
from tests.test_energy_leases import Machine
from tests.test_power_caps import limit_of, started

DATE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)? \S+")
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$")
EPOCH = re.compile(r"\b1[6-9]\d{8}(\.\d+)?\b")
LONG_FLOAT = re.compile(r"\d\.\d{7,}")


def text_of(result: CallToolResult) -> str:
    """The one text block of an answer, checked to read well: no `None`, no raw epoch, no
    16-digit float, no command-line flag, and not the JSON again."""
    assert len(result.content) == 1
    text: str = result.content[0].text  # type: ignore[union-attr]
    assert "None" not in text and not EPOCH.search(text) and not LONG_FLOAT.search(text), text
    assert not re.search(r"(?<![\w-])--[a-z]", text), text
    assert '{"' not in text, text
    return text


@pytest.fixture
def priced(system_users: SystemUsers, short_dir: Path, paths: DaemonPaths) -> Iterator[Machine]:
    """The recorded DGX-1 at 0.32 EUR/kWh; alice may hold 2 GPUs and draw 0.05 kWh a day."""
    alice = system_users.name("alice")
    config = f"[limits.user.{alice}]\nmax_gpus = 2\nmax_kwh_per_day = 0.05\n"
    machine = started(paths, short_dir, config, energy_price_per_kwh=0.32, energy_currency="EUR")
    yield machine
    machine.daemon.stop()


def test_tools_declare_their_answers_and_allocate_offers_the_daemons_policies_and_a_cap(
    system_users: SystemUsers, priced: Machine
) -> None:
    """Every tool has an output schema; allocate's policy is one of the names the daemon
    knows, its default the daemon's (`simple` here, not assumed); a preview with no policy
    uses the daemon's default."""
    with priced.daemon.client() as client:
        policies = client.request("GET", "/v1/policies")
    assert policies["default"] == "simple"

    async def main() -> None:
        async with mcp_session(system_users, "alice", priced.daemon.paths.socket) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            for tool in tools.values():
                assert tool.output_schema is not None and tool.output_schema["type"] == "object"
            allocate = tools["allocate"].input_schema["properties"]
            assert allocate["policy"]["enum"] == policies["policies"]
            assert "simple" in allocate["policy"]["description"]
            assert allocate["power_limit_watts"]["type"] == "integer"
            preview = tools["preview_allocation"].input_schema["properties"]
            assert preview["policy"]["enum"] == policies["policies"]
            plan = data(await session.call_tool("preview_allocation", {"count": 1}))
            assert plan["now"]["policy"] == "simple"

    anyio.run(main)


def test_answers_say_dates_durations_units_energy_and_cost(
    system_users: SystemUsers, priced: Machine
) -> None:
    """A capped grant says its cap and its end as a date; its history gives dates; usage is
    7 days by default with kWh and its cost in EUR; limits read as figures with units."""
    socket = priced.daemon.paths.socket

    async def main(session: ClientSession) -> dict[str, Any]:
        asked = {"count": 2, "power_limit_watts": 200, "label": "fine-tune"}
        granted = await session.call_tool("allocate", asked)
        lease = data(granted)
        text = text_of(granted)
        assert "power capped at 200 W" in text and DATE.search(text), text
        assert lease["power_limit_watts"] == 200 and ISO.match(lease["expires_at"])
        assert limit_of(priced, lease["gpus"][0]["index"]) == 200_000
        await anyio.to_thread.run_sync(priced.step, 111.0)  # 2 GPUs at 200 W: 0.0123 kWh
        freed = await session.call_tool("free", {"lease_id": lease["id"]})
        assert data(freed)["state"] == "freed"
        history = await session.call_tool("lease_history", {"lease_id": lease["id"]})
        text = text_of(history)
        assert [e["event"] for e in data(history)["events"]] == ["granted", "freed"]
        assert all(ISO.match(e["at"]) for e in data(history)["events"]) and DATE.search(text)
        assert "drew 0.0123 kWh" in text, text
        usage = await session.call_tool("my_usage", {})
        text = text_of(usage)
        assert data(usage)["hours"] == 168 and "in the last 7d" in text
        assert data(usage)["energy_cost"]["currency"] == "EUR"
        assert re.search(r"0\.0123 kWh, costing 0\.0039\d? EUR at 0\.32 EUR/kWh", text), text
        limits = await session.call_tool("my_limits", {})
        return {"limits": text_of(limits), "usage": text}

    async def run() -> dict[str, Any]:
        async with mcp_session(system_users, "alice", socket) as session:
            return await main(session)

    said = anyio.run(run)
    assert "max_gpus: 2 GPUs; you use 0 GPUs, 2 GPUs left" in said["limits"]
    assert "max_kwh_per_day: 0.05 kWh; you use 0.0123 kWh, 0.0377 kWh left" in said["limits"]
    assert "max_ttl_seconds: no limit" in said["limits"]
    assert "budget max_kwh_per_day: 0.05 kWh, 0.0377 kWh left" in said["usage"]


def test_refusals_name_the_tools_arguments_not_the_command_lines_flags(
    system_users: SystemUsers, priced: Machine
) -> None:
    """A wait that times out and a TTL that runs into a reservation say what to change in
    the tool's own words (wait_timeout_seconds, ttl_seconds), never `--timeout` or `--ttl`."""
    with priced.daemon.client() as root:
        held = root.allocate(8)
        root.reserve(count=8, start_in=7200, duration=3600, user="root", reason="maintenance")

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with mcp_session(system_users, "alice", priced.daemon.paths.socket) as session:
            waited = {"count": 1, "wait": True, "wait_timeout_seconds": 0.5}
            timed_out = error(await session.call_tool("allocate", waited))
            with priced.daemon.client() as root:
                root.free(held.id)
            long = error(await session.call_tool("allocate", {"count": 1, "ttl_seconds": 3 * 3600}))
            return timed_out, long

    timed_out, long = anyio.run(main)
    assert timed_out["code"] == "gpus_unavailable"
    assert "(wait_timeout_seconds)" in timed_out["message"] and "--" not in timed_out["message"]
    assert long["code"] == "reservation_conflict"
    assert "(ttl_seconds), or wait" in long["message"] and "--" not in long["message"]
