"""The user's own channels file: `$XDG_CONFIG_HOME/gpuallocd/notify.toml` (else
`~/.config/gpuallocd/notify.toml`), written by `gpuallocctl notify add|remove`, read by the
notifier. It holds webhook secrets, so it is the user's alone: created 0600 in a 0700
directory, and refused when another user owns it or others may read or write it (as ssh
refuses a key file). Nobody else, root's daemon included, keeps a copy.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuallocd.host.files import write_file
from gpuallocd.notify.channels import Channel, ChannelError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["DEFAULT_STALE_SECONDS", "ConfigFileError", "NotifyConfig", "config_path"]

DEFAULT_STALE_SECONDS = 3600.0
MAX_CHANNELS = 16
FILE_NAME = "notify.toml"


class ConfigFileError(Exception):
    """The channels file cannot be used: what is wrong and how to mend it."""


def _xdg(variable: str, fallback: str) -> Path:
    found = os.environ.get(variable)
    if found and os.path.isabs(found):
        return Path(found)
    return Path.home() / fallback


def config_path() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "gpuallocd" / FILE_NAME


@dataclass(frozen=True)
class NotifyConfig:
    """The channels, and how old a notice may be before it is summed up as stale."""

    channels: tuple[Channel, ...] = ()
    stale_after_seconds: float = DEFAULT_STALE_SECONDS
    sendmail: str = ""
    path: Path = field(default_factory=config_path)

    @classmethod
    def load(cls, path: Path | None = None) -> NotifyConfig:
        """The file as it is (none yet: no channels)."""
        path = path or config_path()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return cls(path=path)
        except OSError as exc:
            raise ConfigFileError(f"cannot read {path}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as handle:
            _check_private(path, os.fstat(handle.fileno()))
            try:
                data = tomllib.load(handle)
            except tomllib.TOMLDecodeError as exc:
                raise ConfigFileError(f"{path} does not read as TOML: {exc}") from None
        return _from_data(data, path)

    def channel(self, channel_id: str) -> Channel:
        for channel in self.channels:
            if channel.id == channel_id:
                return channel
        raise ConfigFileError(f"no channel {channel_id!r} (gpuallocctl notify list)")

    def with_channel(self, channel: Channel) -> NotifyConfig:
        if any(c.id == channel.id for c in self.channels):
            raise ConfigFileError(f"{channel.id} is a channel already (same kind and target)")
        if len(self.channels) >= MAX_CHANNELS:
            raise ConfigFileError(f"at most {MAX_CHANNELS} channels")
        return replace(self, channels=(*self.channels, channel))

    def without(self, channel_id: str) -> NotifyConfig:
        self.channel(channel_id)
        return replace(self, channels=tuple(c for c in self.channels if c.id != channel_id))

    def save(self) -> None:
        """Write the file whole, 0600, in a 0700 directory (a crash leaves the old one)."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_file(self.path, self.render().encode(), 0o600, durable=True)

    def render(self) -> str:
        lines = [
            "# gpuallocd notifications: written by `gpuallocctl notify`; keep it private (0600).",
            f"stale_after_seconds = {self.stale_after_seconds:g}",
        ]
        if self.sendmail:
            lines.append(f"sendmail = {_string(self.sendmail)}")
        for channel in self.channels:
            lines += ["", "[[channel]]", f"id = {_string(channel.id)}"]
            lines.append(f"kind = {_string(channel.kind)}")
            for key in ("target", "secret", "server"):
                value = getattr(channel, key)
                if value:
                    lines.append(f"{key} = {_string(value)}")
            if channel.events:
                lines.append(f"events = [{', '.join(_string(e) for e in channel.events)}]")
        return "\n".join(lines) + "\n"


def _string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


def _check_private(path: Path, info: os.stat_result) -> None:
    if info.st_uid != os.geteuid():
        raise ConfigFileError(f"{path} belongs to uid {info.st_uid}, not to you: not used")
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise ConfigFileError(
            f"{path} may be read or written by others (it holds secrets): chmod 600 {path}"
        )


def _from_data(data: dict[str, Any], path: Path) -> NotifyConfig:
    channels = []
    for entry in data.get("channel", []):
        try:
            channels.append(
                Channel(
                    kind=str(entry["kind"]),
                    target=str(entry.get("target", "")),
                    secret=str(entry.get("secret", "")),
                    events=tuple(str(e) for e in entry.get("events", [])),
                    server=str(entry.get("server", "")),
                    id=str(entry.get("id", "")),
                )
            )
        except (KeyError, TypeError, ChannelError) as exc:
            raise ConfigFileError(f"{path}: a channel without a kind, or odd: {exc}") from None
    return NotifyConfig(
        channels=tuple(channels),
        stale_after_seconds=float(data.get("stale_after_seconds", DEFAULT_STALE_SECONDS)),
        sendmail=str(data.get("sendmail", "")),
        path=path,
    )
