"""`gpuallocctl mcp` driven by the MCP SDK's own stdio client, as a real user.

The server is started as the user with `setpriv` (uid, primary group and supplementary
groups set by the kernel), so the daemon knows it through SO_PEERCRED as any client.
"""

from __future__ import annotations

import json
import os
import pwd
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from tests.system_users import SystemUsers


def server_parameters(users: SystemUsers | None, short: str, socket: Path) -> StdioServerParameters:
    """`gpuallocctl --socket SOCKET mcp` as the user `short` (as this process where None)."""
    argv = ["-m", "gpuallocd.cli", "--socket", str(socket), "mcp"]
    if users is None:
        env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else None
        return StdioServerParameters(command=sys.executable, args=argv, env=env)
    entry = pwd.getpwnam(users.name(short))
    drop = ["--reuid", str(entry.pw_uid), "--regid", str(entry.pw_gid), "--init-groups"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/", "LANG": "C.UTF-8", **users.env}
    return StdioServerParameters(
        command="setpriv", args=[*drop, users.python, *argv], env=env, cwd="/"
    )


@asynccontextmanager
async def mcp_session(
    users: SystemUsers | None, short: str, socket: Path
) -> AsyncIterator[ClientSession]:
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(server_parameters(users, short, socket), errlog=errlog) as (
                read,
                write,
            ),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def data(result: CallToolResult) -> dict[str, Any]:
    """The structured answer of a call that succeeded."""
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def error(result: CallToolResult) -> dict[str, Any]:
    """The daemon's error (code, message, details) of a call that failed."""
    assert result.is_error
    assert isinstance(result.structured_content, dict)
    found: dict[str, Any] = result.structured_content["error"]
    text = result.content[0].text  # type: ignore[union-attr]
    assert text == f"[{found['code']}] {found['message']}"
    return found


def as_json(text: str) -> Any:
    return json.loads(text)
