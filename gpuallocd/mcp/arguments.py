"""A tool call's arguments checked against the tool's schema before anything is sent.

The schemas use a small part of JSON Schema (type, minimum, maximum, exclusiveMinimum,
minLength, maxLength, minItems, items, enum, required, no other properties), so a small checker
covers them: an agent's mistake comes back as `invalid_request` naming the field.
"""

from __future__ import annotations

from typing import Any

from gpuallocd.errors import InvalidRequest

__all__ = ["check_arguments"]

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
}


def check_arguments(schema: dict[str, Any], arguments: dict[str, Any] | None) -> dict[str, Any]:
    """The arguments, or InvalidRequest for an unknown, missing or ill-typed one."""
    given = dict(arguments or {})
    unknown = sorted(set(given) - set(schema["properties"]))
    if unknown:
        raise InvalidRequest(f"unknown argument(s): {', '.join(unknown)}", fields=unknown)
    missing = [name for name in schema["required"] if name not in given]
    if missing:
        raise InvalidRequest(f"missing argument: {missing[0]}", field=missing[0])
    for name, value in given.items():
        _check(name, schema["properties"][name], value)
    return given


def _check(name: str, rule: dict[str, Any], value: Any) -> None:
    kinds = rule.get("type", [])
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if kinds and not any(_is(kind, value) for kind in kinds):
        raise InvalidRequest(f"{name} must be {' or '.join(kinds)}", field=name, value=value)
    if "enum" in rule and value not in rule["enum"]:
        raise InvalidRequest(f"{name} must be one of {rule['enum']}", field=name, value=value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(name, rule, value)
    if isinstance(value, (str, list)):
        _check_length(name, rule, value)
    if isinstance(value, list) and "items" in rule:
        for item in value:
            _check(name, rule["items"], item)


def _is(kind: str, value: Any) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "number" and isinstance(value, float):
        return value == value and abs(value) != float("inf")  # no NaN, no infinity
    return isinstance(value, _TYPES[kind])


def _check_number(name: str, rule: dict[str, Any], value: float) -> None:
    if "minimum" in rule and value < rule["minimum"]:
        raise InvalidRequest(f"{name} must be at least {rule['minimum']}", field=name, value=value)
    if "maximum" in rule and value > rule["maximum"]:
        raise InvalidRequest(f"{name} must be at most {rule['maximum']}", field=name, value=value)
    if "exclusiveMinimum" in rule and value <= rule["exclusiveMinimum"]:
        low = rule["exclusiveMinimum"]
        raise InvalidRequest(f"{name} must be more than {low}", field=name, value=value)


def _check_length(name: str, rule: dict[str, Any], value: str | list[Any]) -> None:
    low, high = rule.get("minLength", rule.get("minItems", 0)), rule.get("maxLength")
    if len(value) < low or (high is not None and len(value) > high):
        raise InvalidRequest(f"{name} has the wrong length ({len(value)})", field=name)
