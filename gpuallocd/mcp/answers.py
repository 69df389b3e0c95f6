"""What a tool call returns: a short text for the model plus the structured data (each said
once: the text is not followed by the JSON again), or an MCP tool error (`isError`) carrying
the daemon's stable error code and message.

This is the one place where errors become tool results: the daemon's (through the client's
exception classes), the server's own argument checks, and anything unexpected, which is
logged and answered as `internal_error` so that the server never goes down with a call. A
daemon message is said in the agent's words: a command-line flag it names becomes the tool
argument (`--ttl` is `ttl_seconds`), and other users' words it quotes (a drain's or a
reservation's reason, `details.quoted`) are withheld (`foreign.py`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import mcp.types as types
from gpulease import GpuallocError as ClientError

from gpuallocd.errors import GpuallocError
from gpuallocd.mcp.foreign import OthersText

__all__ = ["Answer", "error_result", "result_of"]

log = logging.getLogger(__name__)

# The command line's flags that daemon messages name, as the tools' arguments.
ARGUMENT_OF_FLAG = {
    "--ttl": "ttl_seconds",
    "--timeout": "wait_timeout_seconds",
    "--wait": "wait",
    "--gpu": "gpus",
    "--memory": "memory",
    "--mig": "mig_profile",
    "--policy": "policy",
    "--label": "label",
    "--power-limit": "power_limit_watts",
    "--keep": "keep",
}
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")


@dataclass(frozen=True, slots=True)
class Answer:
    """A tool's answer: `summary` in words (one line or a few), `data` as JSON."""

    summary: str
    data: dict[str, Any]


def result_of(answer: Answer) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=answer.summary)],
        structured_content=answer.data,
    )


def in_tool_words(message: str) -> str:
    """A daemon message with each command-line flag it names as the tool argument (one no
    tool has: its name with underscores, `--foo-bar` as `foo_bar`)."""

    def argument(found: re.Match[str]) -> str:
        flag = found.group(0)
        return ARGUMENT_OF_FLAG.get(flag, flag[2:].replace("-", "_"))

    return _FLAG.sub(argument, message)


def _withheld(message: str, details: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The message and details with the other users' words they quote withheld."""
    quoted = details.pop("quoted", None) or []
    others = OthersText()
    kept = []
    for words in quoted:
        value = others.value(words.get("text"), words.get("by"), words.get("by_uid"))
        if isinstance(value, dict) and words.get("text"):
            message = message.replace(words["text"], OthersText.words(value))
        kept.append(value)
    if kept:
        details["quoted"] = kept
    return message, details


def error_result(exc: BaseException) -> types.CallToolResult:
    """The tool error for `exc`: `[code] message`, with code, message and details as data."""
    if isinstance(exc, (ClientError, GpuallocError)):
        code, message, details = exc.code, exc.message, dict(exc.details or {})
        message, details = _withheld(message, details)  # first: the words as quoted
        message = in_tool_words(message)
    else:
        log.error("a tool call failed unexpectedly", exc_info=exc)
        code, message, details = "internal_error", f"{type(exc).__name__}: {exc}", {}
    error = {"code": code, "message": message, "details": details}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"[{code}] {message}")],
        structured_content={"error": error},
        is_error=True,
    )
