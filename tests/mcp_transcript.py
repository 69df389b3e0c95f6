"""An agent-style session with `gpuallocctl mcp`, printed as a transcript: list the tools,
look at the node (other users' labels withheld, then asked for), preview, allocate, export
the environment, free, read its usage.

    python -m tests.mcp_transcript            # on a fresh daemon (example 4-GPU topology)
    python -m tests.mcp_transcript SOCKET     # on a running daemon, as the user running it

docs/agents.md shows its output; tests/test_mcp_server.py runs it.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from tests.harness import DaemonPaths, ThreadDaemon
from tests.mcp_session import mcp_session

STEPS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("gpus", {}),
    ("gpus", {"others_text": True}),
    ("my_limits", {}),
    ("preview_allocation", {"count": 3}),
    ("preview_allocation", {"count": 2}),
    ("allocate", {"count": 2, "label": "agent: fine-tune", "ttl_seconds": 1800}),
    ("export_env", {"lease_id": "{lease}"}),
    ("free", {"lease_id": "{lease}"}),
    ("my_usage", {}),
)


def _arguments(arguments: dict[str, Any], lease: str) -> dict[str, Any]:
    return {k: v.format(lease=lease) if isinstance(v, str) else v for k, v in arguments.items()}


async def transcript(socket: Path) -> list[str]:
    """The session's lines: each call, then the text of its answer."""
    lines: list[str] = []
    started = time.monotonic()
    async with mcp_session(None, "", socket) as session:
        tools = (await session.list_tools()).tools
        lines.append(f"# server up and tools listed in {time.monotonic() - started:.2f} s")
        lines.append(f"> tools/list\n{', '.join(tool.name for tool in tools)}")
        lease = ""
        for name, arguments in STEPS:
            sent = _arguments(arguments, lease)
            result = await session.call_tool(name, sent)
            text = result.content[0].text  # type: ignore[union-attr]
            flag = " (error)" if result.is_error else ""
            lines.append(f"> {name} {json.dumps(sent)}{flag}\n{text}")
            if name == "allocate":
                lease = result.structured_content["id"]  # type: ignore[index]
    return lines


def main() -> None:
    if len(sys.argv) > 1:
        print("\n\n".join(anyio.run(transcript, Path(sys.argv[1]))))
        return
    with tempfile.TemporaryDirectory(prefix="ga-", dir="/tmp") as root:
        daemon = ThreadDaemon(DaemonPaths(Path(root)), default_policy="best-effort").start()
        try:
            print("\n\n".join(anyio.run(transcript, daemon.paths.socket)))
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
