"""Reading the settings: defaults < config file (TOML) < environment < command-line options.

One exception: GPUALLOCD_SOCKET, which clients read too, does not override a config file
that names `socket` (a shell that exported it for the client would else move the daemon).

Every key, type and allowed value comes from the settings table (`settings.py`). A wrong
key, type or value is a ConfigError that names where it came from, in one line: whatever a
file holds (bytes that are not UTF-8, an integer of thousands of digits, an infinite float)
is refused here, before anything uses it (tests/test_hostile_config.py fuzzes this).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpulease.sizes import parse_watts

from gpuallocd.allocator.site.limits import LIMIT_NAMES
from gpuallocd.daemon.config.backup_checks import check_backup_settings
from gpuallocd.daemon.config.limits_table import (
    check_rule_settings,
    parse_limits,
    parse_unleased_modes,
)
from gpuallocd.daemon.config.notify_checks import check_notify_settings
from gpuallocd.daemon.config.scheduling_checks import check_scheduling_settings
from gpuallocd.daemon.config.settings import DaemonConfig, Setting, settings
from gpuallocd.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["load_config", "parse_text"]

_BOOL_WORDS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
# The largest magnitude a number setting may have: an integer fits 64 bits, a float is
# finite and counts whole units exactly (2**53 seconds is 285 million years).
MAX_INTEGER = 2**63 - 1
MAX_FLOAT = float(2**53)
MAX_MODE = 0o7777
# A setting's type in the words of a message ("must be a number, not '1600W'").
_TYPE_WORDS = {float: "a number", int: "a whole number", str: "a string", bool: "true or false"}
# How a file or the environment may write a number with its unit: `"1600W"` as the command
# line's `--power-limit 1600W` (the client's reading of watts).
_UNIT_READERS = {"W": parse_watts}
_UNIT_NAMES = {"W": "watts"}


def _check_magnitude(setting: Setting, value: int | float, where: str) -> None:
    if setting.octal and not 0 <= value <= MAX_MODE:
        raise ConfigError(f"{where}: {setting.name} must be a file mode from 0o0 to 0o7777")
    if isinstance(value, int) and abs(value) > MAX_INTEGER:
        raise ConfigError(f"{where}: {setting.name} is too large")
    if isinstance(value, float) and not abs(value) <= MAX_FLOAT:  # inf and nan fail too
        raise ConfigError(f"{where}: {setting.name} must be a finite number below 2**53")


def _checked_list(setting: Setting, value: Any, where: str) -> tuple[str, ...]:
    """A list of strings (TOML array, or a tuple already parsed) as a tuple."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {setting.name} must be a list of strings")
    return tuple(v.strip() for v in value if v.strip())


def _octal_in_file(setting: Setting, value: Any, where: str) -> Any:
    """A file mode as the file gives it: TOML's `0o660`, or a string `"0660"`. An integer
    that is a mode only when read as octal (`660`, decimal for 0o1224) is refused with how
    to write it: a socket has no use for the bits above 0o777."""
    if isinstance(value, str):
        return parse_text(setting, value, where)
    digits = str(value) if 0o777 < value <= 7777 else ""  # never str() of a huge int
    if digits and set(digits) <= set("01234567"):
        octal = digits.lstrip("0")
        raise ConfigError(
            f"{where}: {setting.name} = {value} is decimal ({value:#o}): "
            f'write 0o{octal} or "0{octal}"'
        )
    return value


def _expected(setting: Setting) -> str:
    """What the setting takes, in words: `a number of watts, e.g. 1600 or "1600W"`."""
    if setting.octal:  # `--socket-mode 438` is a whole number, and no mode in octal
        return "a file mode in octal, e.g. 0660 or 0o660"
    if setting.unit is None:
        return _TYPE_WORDS.get(setting.type, setting.type.__name__)
    example = setting.example or "1"
    return f'a number of {_UNIT_NAMES[setting.unit]}, e.g. {example} or "{example}{setting.unit}"'


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:40]}..."


def _with_unit(setting: Setting, value: Any, where: str) -> Any:
    """A number written with the setting's unit (`"1600W"`) as the number."""
    if setting.unit is None or not isinstance(value, str):
        return value
    try:
        return _UNIT_READERS[setting.unit](value)
    except ValueError:
        raise ConfigError(
            f"{where}: {setting.name} must be {_expected(setting)}, not {_shown(value)}"
        ) from None


def _check_minimum(setting: Setting, value: float, where: str) -> None:
    if setting.minimum is not None and value < setting.minimum:
        raise ConfigError(
            f"{where}: {setting.name} must be at least {setting.minimum:g}, not {value:g}"
        )


def _checked(setting: Setting, value: Any, where: str) -> Any:
    """A value of the setting's type and choices, else a ConfigError naming `where`."""
    if setting.octal and isinstance(value, (str, int)) and not isinstance(value, bool):
        value = _octal_in_file(setting, value, where) if where.startswith("config") else value
    if setting.type is tuple:
        return _checked_list(setting, value, where)
    value = _with_unit(setting, value, where)
    expected = (int, float) if setting.type is float else (setting.type,)
    if (isinstance(value, bool) and setting.type is not bool) or not isinstance(value, expected):
        raise ConfigError(
            f"{where}: {setting.name} must be {_expected(setting)}, not {_shown(value)}"
        )
    if setting.choices and value not in setting.choices:
        raise ConfigError(f"{where}: {setting.name} must be one of {', '.join(setting.choices)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_magnitude(setting, value, where)
        _check_minimum(setting, value, where)
    return float(value) if isinstance(value, int) and setting.type is float else value


def parse_text(setting: Setting, text: str, where: str) -> Any:
    """A value given as text (environment, command line), converted to the setting's type."""
    try:
        if setting.type is bool:
            return _checked(setting, _BOOL_WORDS[text.strip().lower()], where)
        if setting.type is int:
            base = 8 if setting.octal else 10
            return _checked(setting, int(text.strip().removeprefix("0o"), base), where)
        if setting.type is float:
            number: Any = text if setting.unit and not _is_number(text) else float(text)
            return _checked(setting, number, where)
        if setting.type is tuple:  # comma-separated
            return _checked(setting, [v.strip() for v in text.split(",") if v.strip()], where)
    except (ValueError, KeyError, OverflowError):
        raise ConfigError(
            f"{where}: {setting.name} must be {_expected(setting)}, not {_shown(text)}"
        ) from None
    return _checked(setting, text, where)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _read_toml(path: Path, where: str) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 (byte {exc.start + 1})") from None
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: {_one_line(exc)}{_leading_zero_hint(text)}") from None
    except (ValueError, RecursionError) as exc:  # an integer past the digits Python reads
        raise ConfigError(f"{where}: {_one_line(exc)}") from None
    return data


_LEADING_ZERO = re.compile(r"^\s*([A-Za-z_][\w-]*)\s*=\s*0(\d+)\s*(?:#.*)?$", re.MULTILINE)


def _leading_zero_hint(text: str) -> str:
    """TOML refuses `0660`; a shell's octal mode is the likely cause: say how TOML writes it."""
    found = _LEADING_ZERO.search(text)
    if found is None:
        return ""
    key, digits = found.group(1), found.group(2)
    return f'; write {key} = 0o{digits} (TOML\'s octal) or "0{digits}"'


def _unknown(key: str, known: Iterable[str], where: str) -> ConfigError:
    """An unknown key, with where it belongs when it is a limit written outside `[limits]`,
    else the nearest known one where one is near."""
    if key in LIMIT_NAMES:
        return ConfigError(
            f"{where}: {key} is a limit: it belongs in the [limits] table (for everyone), or "
            f"in [limits.group.NAME] or [limits.user.NAME]; write it below one of those "
            "headers (docs/limits.md)"
        )
    near = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return ConfigError(f"{where}: unknown setting {key!r}{hint}")


def _from_file(path: Path, table: Mapping[str, Setting]) -> dict[str, Any]:
    where = f"config file {path}"
    data = _read_toml(path, where)
    section = data.get("gpuallocd", data)
    if not isinstance(section, Mapping):
        raise ConfigError(f"{where}: gpuallocd must be a table ([gpuallocd])")
    values: dict[str, Any] = {}
    if "limits" in section or "limits" in data:
        limits = section.get("limits", data.get("limits"))
        values["limits"] = parse_limits(limits, where)
        values["unleased_modes"] = parse_unleased_modes(limits, where)
    for key, value in section.items():
        if key == "limits":
            continue
        if key not in table:
            raise _unknown(key, [*table, "limits"], where)
        values[key] = _checked(table[key], value, where)
    return values


def _from_environment(environ: Mapping[str, str], table: Mapping[str, Setting]) -> dict[str, Any]:
    return {
        name: parse_text(setting, environ[setting.env], f"environment {setting.env}")
        for name, setting in table.items()
        if environ.get(setting.env)
    }


def _clients_socket_variable(
    from_file: Mapping[str, Any], from_env: dict[str, Any], where: Path | None, notes: list[str]
) -> None:
    """GPUALLOCD_SOCKET is also the clients' variable (the quickstart exports it): a config
    file that names its socket wins over it, and the daemon says that it did."""
    if "socket" in from_file and "socket" in from_env:
        ignored = from_env.pop("socket")
        if ignored != from_file["socket"]:
            notes.append(
                f"GPUALLOCD_SOCKET={ignored} is not used: config file {where} sets socket = "
                f"{from_file['socket']!r} (the variable is read when the file names no socket; "
                "--socket overrides both)"
            )


def load_config(
    config_file: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    notes: list[str] | None = None,
    **options: Any,
) -> DaemonConfig:
    """The daemon's settings; `options` are already typed, None meaning not given. What
    the daemon should log about how it read them is appended to `notes`."""
    table = {s.name: s for s in settings()}
    unknown = set(options) - set(table)
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    config = DaemonConfig()
    from_file = _from_file(config_file, table) if config_file is not None else {}
    config = replace(config, **from_file)
    from_env = _from_environment(os.environ if environ is None else environ, table)
    _clients_socket_variable(from_file, from_env, config_file, [] if notes is None else notes)
    config = replace(config, **from_env)
    given = {
        k: _checked(table[k], v, f"option {table[k].option}")
        for k, v in options.items()
        if v is not None
    }
    config = replace(config, **given)
    check_rule_settings(config)
    check_scheduling_settings(config)
    check_backup_settings(config)
    check_notify_settings(config)
    return config
