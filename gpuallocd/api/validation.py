"""Turning a JSON body into typed values, or an InvalidRequest that says what is wrong."""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Mapping
from typing import Any

from gpuallocd.errors import InvalidRequest, MalformedJson

__all__ = ["Body", "first_unprintable", "parse_json_object"]

MAX_LABEL_LENGTH = 200
MAX_GPU_REFS = 1024
# Far deeper than any request nests. Python's parser gives up at a depth of its own (about
# 1,000 up to 3.11, tens of thousands since 3.12): this limit makes the answer the same on all.
MAX_JSON_DEPTH = 100
_NESTED_TOO_DEEPLY = f"the body is not valid JSON: nested more than {MAX_JSON_DEPTH} levels deep"


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object; an empty body is an empty object."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except RecursionError:
        raise MalformedJson(_NESTED_TOO_DEEPLY) from None
    except ValueError as exc:  # bad syntax or encoding, or an integer with too many digits
        raise MalformedJson(f"the body is not valid JSON: {exc}") from None
    if _nests_deeper_than(data, MAX_JSON_DEPTH):
        raise MalformedJson(_NESTED_TOO_DEEPLY)
    if not isinstance(data, dict):
        raise InvalidRequest("the body must be a JSON object")
    return data


def _nests_deeper_than(data: Any, limit: int) -> bool:
    """Whether arrays and objects in `data` nest more than `limit` deep (walked with a stack
    of its own: a deep value must not exhaust Python's recursion)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = list(value.values())
        elif not isinstance(value, list):
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in value)
    return False


# Characters that steer a terminal or reorder text: C0/C1 controls, DEL, line and paragraph
# separators, and format characters such as the bidirectional overrides.
_UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
_JOINERS = frozenset({"\u200c", "\u200d"})  # zero-width (non-)joiners build emoji and scripts


def first_unprintable(text: str) -> str | None:
    """The first character of `text` that could rewrite a terminal, or None."""
    if text.isascii() and text.isprintable():  # the usual text: no ASCII control in it
        return None
    for char in text:
        if char not in _JOINERS and unicodedata.category(char) in _UNPRINTABLE_CATEGORIES:
            return char
    return None


class Body:
    """Typed access to a JSON object; unknown keys are an error, so typos never pass silently."""

    def __init__(self, data: Mapping[str, Any], allowed: frozenset[str]) -> None:
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise InvalidRequest(f"unknown field(s): {', '.join(unknown)}", fields=unknown)
        self._data = data

    def has(self, key: str) -> bool:
        """Whether the body gives `key` (a null is not given)."""
        return self._data.get(key) is not None

    def integer(self, key: str, *, minimum: int | None = None) -> int | None:
        value = self._data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidRequest(f"{key} must be an integer", field=key)
        if minimum is not None and value < minimum:
            raise InvalidRequest(f"{key} must be at least {minimum}", field=key)
        return value

    def seconds(self, key: str, *, zero: bool = False) -> float | None:
        """A finite number of seconds, positive (`zero`: at least 0)."""
        value = self._data.get(key)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise InvalidRequest(f"{key} must be a number of seconds", field=key)
        if value < 0 or (value == 0 and not zero):
            raise InvalidRequest(f"{key} must be {'at least 0' if zero else 'positive'}", field=key)
        return float(value)

    def seconds_list(self, key: str, *, max_items: int) -> list[float] | None:
        """A list of at most `max_items` positive numbers of seconds (None: not given)."""
        value = self._data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or len(value) > max_items:
            raise InvalidRequest(f"{key} must be a list of at most {max_items} numbers", field=key)
        return [Body({key: item}, frozenset({key})).seconds(key) or 0.0 for item in value]

    def text(self, key: str, *, max_length: int = MAX_LABEL_LENGTH) -> str | None:
        value = self._data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise InvalidRequest(f"{key} must be a string", field=key)
        if len(value) > max_length:
            raise InvalidRequest(f"{key} may be at most {max_length} characters", field=key)
        bad = first_unprintable(value)
        if bad is not None:
            raise InvalidRequest(
                f"{key} may not contain control characters (found U+{ord(bad):04X})", field=key
            )
        return value

    def choice(self, key: str, choices: tuple[str, ...]) -> str | None:
        value = self.text(key)
        if value is not None and value not in choices:
            raise InvalidRequest(f"{key} must be one of {', '.join(choices)}", field=key)
        return value

    def boolean(self, key: str) -> bool | None:
        value = self._data.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise InvalidRequest(f"{key} must be true or false", field=key)
        return value

    def gpu_refs(self, key: str) -> tuple[str | int, ...]:
        """A list of GPUs named by UUID (string) or index (non-negative integer)."""
        value = self._data.get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not value or len(value) > MAX_GPU_REFS:
            raise InvalidRequest(
                f"{key} must be a non-empty list of GPU UUIDs or indices", field=key
            )
        for ref in value:
            valid_index = isinstance(ref, int) and not isinstance(ref, bool) and ref >= 0
            if not (valid_index or (isinstance(ref, str) and ref)):
                raise InvalidRequest(
                    f"{key}: {ref!r} is neither a GPU UUID nor an index", field=key
                )
        return tuple(value)
