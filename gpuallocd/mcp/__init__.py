"""An MCP server for agents on a shared machine: `gpuallocctl mcp` (docs/agents.md).

The server runs as the user who starts it and speaks to the daemon over its Unix socket, so
the daemon knows the agent as that user from the kernel (SO_PEERCRED): an agent has its
user's rights and limits, no more, and no token is involved. Other users' words (labels,
reasons, process names) reach the agent as data, never as instructions (`foreign.py`). The
MCP SDK is installed apart, into gpuallocctl's own environment (docs/agents.md); nothing
else in gpuallocd imports this package.
"""
