"""`mcp`: the MCP server for coding and research agents, on stdio (docs/agents.md)."""

from __future__ import annotations

import os
import sys
import sysconfig

import click

__all__ = ["COMMANDS", "install_command"]

SDK = "'mcp>=2'"  # the official MCP SDK; no index serves gpuallocd itself, so no extra


def install_command() -> str:
    """The one command that puts the SDK where this `gpuallocctl` runs from: the pip of its
    own environment (`/opt/gpuallocd/bin/pip` on the README's install, `.venv/bin/pip` in a
    checkout), with sudo where that environment is not the user's to write."""
    pip = os.path.join(os.path.dirname(sys.executable), "pip")
    command = (
        f"{pip} install {SDK}" if os.path.exists(pip) else f"{sys.executable} -m pip install {SDK}"
    )
    writable = os.access(sysconfig.get_paths()["purelib"], os.W_OK)
    return command if writable else f"sudo {command}"


@click.command(name="mcp", short_help="Serve the MCP tools on stdio for a coding agent")
@click.pass_context
def mcp_command(ctx: click.Context) -> None:
    """Serve the Model Context Protocol on stdin/stdout for an agent: every tool call is a
    call to the daemon as you (needs the MCP SDK in gpuallocctl's own environment:
    `sudo /opt/gpuallocd/bin/pip install 'mcp>=2'` on the README's install; docs/agents.md)."""
    try:
        from gpuallocd.mcp.server import serve
    except ImportError as exc:
        raise click.ClickException(
            f"the MCP server needs the official MCP SDK in the environment gpuallocctl runs "
            f"from; install it with: {install_command()} ({exc})"
        ) from None
    try:
        serve(ctx.obj.socket)
    except KeyboardInterrupt:  # Ctrl-C where a person started it by hand
        ctx.exit(130)


COMMANDS = (mcp_command,)
