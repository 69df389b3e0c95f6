"""Daemon settings: defaults, then the config file (TOML), then the environment and options."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from gpuallocd.errors import InvalidRequest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["DEFAULT_SOCKET", "DaemonConfig", "load_config"]

DEFAULT_SOCKET = "/run/gpuallocd/gpuallocd.sock"
DEFAULT_STATE_DIR = "/var/lib/gpuallocd"


@dataclass(frozen=True)
class DaemonConfig:
    """Everything the daemon reads at start. Every key may be set in the config file."""

    socket: str = DEFAULT_SOCKET
    socket_mode: int = 0o666
    socket_group: str | None = None
    state_dir: str = DEFAULT_STATE_DIR
    inventory: str = "nvml"
    default_policy: str = "best-effort"
    default_ttl_seconds: float = 3600.0
    max_ttl_seconds: float = 7 * 24 * 3600.0
    sample_interval_seconds: float = 2.0
    max_body_bytes: int = 64 * 1024
    ledger_sync: str = "full"
    shutdown_grace_seconds: float = 5.0
    log_level: str = "INFO"

    @property
    def ledger_path(self) -> Path:
        return Path(self.state_dir) / "ledger.sqlite3"

    @property
    def lock_path(self) -> Path:
        return Path(self.state_dir) / "gpuallocd.lock"


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "str | None": (str,),
    "int": (int,),
    "float": (int, float),
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "ledger_sync": ("full", "normal"),
    "log_level": ("DEBUG", "INFO", "WARNING", "ERROR"),
}


def _check_setting(path: Path, key: str, value: Any) -> None:
    known = {f.name: str(f.type) for f in fields(DaemonConfig)}
    if key not in known:
        raise InvalidRequest(f"config file {path}: unknown setting {key!r}")
    if isinstance(value, bool) or not isinstance(value, _PYTHON_TYPES[known[key]]):
        raise InvalidRequest(f"config file {path}: {key} has the wrong type")
    if key in _CHOICES and value not in _CHOICES[key]:
        allowed = ", ".join(_CHOICES[key])
        raise InvalidRequest(f"config file {path}: {key} must be one of {allowed}")


def _from_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidRequest(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidRequest(f"config file {path}: {exc}") from None
    section = data.get("gpuallocd", data)
    for key, value in section.items():
        _check_setting(path, key, value)
    return dict(section)


def load_config(config_file: Path | None = None, **overrides: Any) -> DaemonConfig:
    """Defaults < config file < GPUALLOCD_SOCKET < explicit options (None means unset)."""
    config = DaemonConfig()
    if config_file is not None:
        config = replace(config, **_from_file(config_file))
    env_socket = os.environ.get("GPUALLOCD_SOCKET")
    if env_socket:
        config = replace(config, socket=env_socket)
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(config, **given)
