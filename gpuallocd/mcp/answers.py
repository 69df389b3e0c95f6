"""What a tool call returns: a short text for the model plus the structured data, or an MCP
tool error (`isError`) carrying the daemon's stable error code and message.

This is the one place where errors become tool results: the daemon's (through the client's
exception classes), the server's own argument checks, and anything unexpected, which is
logged and answered as `internal_error` so that the server never goes down with a call.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import mcp.types as types
from gpulease import GpuallocError as ClientError

from gpuallocd.errors import GpuallocError

__all__ = ["Answer", "error_result", "result_of"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Answer:
    """A tool's answer: `summary` in words (one line or a few), `data` as JSON."""

    summary: str
    data: dict[str, Any]


def result_of(answer: Answer) -> types.CallToolResult:
    text = f"{answer.summary}\n\n{json.dumps(answer.data, sort_keys=True)}"
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=answer.data,
    )


def error_result(exc: BaseException) -> types.CallToolResult:
    """The tool error for `exc`: `[code] message`, with code, message and details as data."""
    if isinstance(exc, (ClientError, GpuallocError)):
        code, message, details = exc.code, exc.message, dict(exc.details or {})
    else:
        log.error("a tool call failed unexpectedly", exc_info=exc)
        code, message, details = "internal_error", f"{type(exc).__name__}: {exc}", {}
    error = {"code": code, "message": message, "details": details}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"[{code}] {message}")],
        structured_content={"error": error},
        is_error=True,
    )
