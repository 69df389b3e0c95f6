"""`mcp`: the MCP server for coding and research agents, on stdio (docs/agents.md)."""

from __future__ import annotations

import click

__all__ = ["COMMANDS"]


@click.command(name="mcp", short_help="Serve the MCP tools on stdio for a coding agent")
@click.pass_context
def mcp_command(ctx: click.Context) -> None:
    """Serve the Model Context Protocol on stdin/stdout for an agent: every tool call is a
    call to the daemon as you (needs `pip install 'gpuallocd[mcp]'`; docs/agents.md)."""
    try:
        from gpuallocd.mcp.server import serve
    except ImportError as exc:
        raise click.ClickException(
            f"the MCP server needs the SDK: pip install 'gpuallocd[mcp]' ({exc})"
        ) from None
    try:
        serve(ctx.obj.socket)
    except KeyboardInterrupt:  # Ctrl-C where a person started it by hand
        ctx.exit(130)


COMMANDS = (mcp_command,)
