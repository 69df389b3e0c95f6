"""`gpuallocctl run` without click: read the plain forms of its arguments by hand.

Importing click and every command costs several times the interpreter's own start, and
`run` launches jobs. For the forms people write (`[--socket S] [--json] run [-n N]
[--gpu G ...] [--policy P] [--ttl T] [--label L] [--wait] [--timeout T] [--visible V]
[--] COMMAND ...`) this reader builds the request itself; for anything else (help, an
unknown option, a value it does not accept) it says None and the click command line runs,
with its messages and checks. The two readers are compared in the tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpuallocd.cli.runner import RunRequest

__all__ = ["QuickRun", "parse_quick_run"]

_DIGITS = frozenset("0123456789")


def _is_digits(text: str, most: int) -> bool:
    return 0 < len(text) <= most and set(text) <= _DIGITS


def _is_decimal(text: str) -> bool:
    """Digits, or digits '.' digits: a form click's float conversion reads the same way."""
    whole, dot, fraction = text.partition(".")
    return _is_digits(whole, 12) and (not dot or _is_digits(fraction, 12))


@dataclass(frozen=True)
class QuickRun:
    socket: str | None
    json: bool
    request: RunRequest


def _count(text: str) -> int | None:
    return int(text) if _is_digits(text, 9) and int(text) >= 1 else None


def _positive(text: str) -> float | None:
    return float(text) if _is_decimal(text) and float(text) > 0 else None


def _visible(text: str) -> str | None:
    return text if text in ("uuid", "index") else None


def _text(text: str) -> str | None:
    return text


# option -> (RunRequest field, converter); a converter's None means "let click decide".
_VALUED: dict[str, tuple[str, Callable[[str], Any]]] = {
    "-n": ("count", _count),
    "--count": ("count", _count),
    "--policy": ("policy", _text),
    "--ttl": ("ttl", _positive),
    "--label": ("label", _text),
    "--timeout": ("timeout", _positive),
    "--visible": ("visible", _visible),
}


def _split(arg: str) -> tuple[str, str | None]:
    """`--opt=value` -> (--opt, value); `-nVALUE` -> (-n, VALUE); else (arg, None)."""
    if arg.startswith("--"):
        name, eq, value = arg.partition("=")
        return name, value if eq else None
    if arg.startswith("-n") and len(arg) > 2:
        return "-n", arg[2:]
    return arg, None


def _parse_global(args: Sequence[str]) -> tuple[str | None, bool, int] | None:
    """--socket and --json before `run`: (socket, json, index of `run`), or None."""
    socket = os.environ.get("GPUALLOCD_SOCKET") or None
    as_json = False
    i = 0
    while i < len(args):
        name, value = _split(args[i])
        if name == "--json" and value is None:
            as_json = True
        elif name == "--socket":
            if value is None:
                if i + 1 >= len(args):
                    return None
                i, value = i + 1, args[i + 1]
            socket = value
        elif args[i] == "run":
            return socket, as_json, i
        else:
            return None
        i += 1
    return None


def _parse_run(args: Sequence[str]) -> RunRequest | None:
    """The options and COMMAND after `run`, or None."""
    request = RunRequest(command=())
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        name, value = _split(arg)
        if name == "--wait" and value is None:
            request = replace(request, wait=True)
        elif name == "--gpu" or name in _VALUED:
            if value is None:
                if i + 1 >= len(args):
                    return None
                i, value = i + 1, args[i + 1]
            if name == "--gpu":
                request = replace(request, gpus=(*request.gpus, value))
            else:
                field, convert = _VALUED[name]
                converted = convert(value)
                if converted is None:
                    return None
                request = replace(request, **{field: converted})
        else:
            return None
        i += 1
    command = tuple(args[i:])
    return replace(request, command=command) if command else None


def parse_quick_run(args: Sequence[str]) -> QuickRun | None:
    """The `run` invocation in `args` (argv without the program), or None for click to read."""
    found = _parse_global(args)
    if found is None:
        return None
    socket, as_json, at = found
    request = _parse_run(args[at + 1 :])
    return None if request is None else QuickRun(socket, as_json, request)
