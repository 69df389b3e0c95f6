"""What the notifier must not forget: how far it delivered each daemon's feed (the cursor, by
socket), when the last notice it delivered happened, and each channel's last delivery.

`$XDG_STATE_HOME/gpuallocd/notify-state.json` (else `~/.local/state/...`), written whole and
synced after each notice is delivered to every channel, so a notifier that stops (a logout, a
reboot, kill -9) starts again after the last notice it delivered: nothing twice, none lost. A
lock on the file keeps a second notifier of the same user from delivering the same feed.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuallocd.host.files import write_file

__all__ = ["AlreadyRunning", "NotifyState", "state_path"]


class AlreadyRunning(Exception):
    """Another notifier of this user holds the state."""


def state_path() -> Path:
    found = os.environ.get("XDG_STATE_HOME")
    base = Path(found) if found and os.path.isabs(found) else Path.home() / ".local" / "state"
    return base / "gpuallocd" / "notify-state.json"


@dataclass
class NotifyState:
    path: Path = field(default_factory=state_path)
    cursors: dict[str, int] = field(default_factory=dict)
    delivered_at: dict[str, float] = field(default_factory=dict)  # by socket
    channels: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None = None) -> NotifyState:
        path = path or state_path()
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(path=path)
        except (OSError, ValueError):
            data = {}  # unreadable: start from the daemon's next notice
        return cls(
            path=path,
            cursors={str(k): int(v) for k, v in data.get("cursors", {}).items()},
            delivered_at={str(k): float(v) for k, v in data.get("delivered_at", {}).items()},
            channels=dict(data.get("channels", {})),
        )

    def save(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = {
            "cursors": self.cursors,
            "delivered_at": self.delivered_at,
            "channels": self.channels,
        }
        write_file(self.path, json.dumps(data, sort_keys=True).encode(), 0o600, durable=True)

    def note(self, channel_id: str, at: float, error: str | None) -> None:
        self.channels[channel_id] = {"at": at, "ok": error is None, "error": error}

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Held while a notifier runs; AlreadyRunning if another one holds it."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = self.path.with_suffix(".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise AlreadyRunning(f"another notifier holds {lock}") from None
            yield
        finally:
            os.close(fd)
