"""A private session bus (`dbus-daemon --session`) and a stand-in for the desktop's
notification server: it owns org.freedesktop.Notifications on that bus, answers `Notify` as a
real server does (with an id) and writes each notification as a JSON line to a file.

Run as a module (`python -m tests.notify_desktop ADDRESS OUT`) so it can run as the user
whose bus it is; `--render OUT.png` draws one notification as a desktop shows it (for
docs/notifications.md, through headless chromium)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

BUS_NAME = "org.freedesktop.Notifications"


def serve(address: str, out: Path) -> None:
    """Own the name on the bus at `address`; answer every Notify until killed."""
    from jeepney import HeaderFields, MessageType, new_method_return
    from jeepney.bus_messages import message_bus
    from jeepney.io.blocking import open_dbus_connection

    connection = open_dbus_connection(bus=address)
    reply = connection.send_and_get_reply(message_bus.RequestName(BUS_NAME, 4))
    assert reply.body[0] == 1, f"could not own {BUS_NAME}: {reply.body}"
    out.touch()
    given = 0
    while True:
        message = connection.receive()
        header = message.header
        if header.message_type is not MessageType.method_call:
            continue
        member = header.fields.get(HeaderFields.member)
        if member == "Notify":
            app, _replaces, _icon, summary, body, _actions, hints, expire = message.body
            given += 1
            record = {
                "id": given,
                "app": app,
                "summary": summary,
                "body": body,
                "urgency": hints.get("urgency", ("y", 1))[1],
                "expire": expire,
            }
            with out.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
            connection.send(new_method_return(message, "u", (given,)))
        elif member == "GetServerInformation":
            info = ("stand-in", "gpuallocd tests", "1", "1.2")
            connection.send(new_method_return(message, "ssss", info))
        else:
            connection.send(new_method_return(message))


def received(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line]


@dataclass
class Desktop:
    """A session bus and its notification server, run as one user."""

    address: str
    out: Path
    processes: list[subprocess.Popen[bytes]]

    def notifications(self) -> list[dict[str, Any]]:
        return received(self.out)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.kill()
            process.wait(10)


def start_desktop(
    directory: Path,
    python: str,
    env: dict[str, str],
    user: int | None = None,
    group: int | None = None,
) -> Desktop:
    """`dbus-daemon --session` on a socket in `directory` and the stand-in on it (as `user`)."""
    if shutil.which("dbus-daemon") is None:
        pytest.skip("dbus-daemon is not installed (apt-get install dbus-daemon)")
    address = f"unix:path={directory}/bus"
    ids = {} if user is None else {"user": user, "group": group, "extra_groups": []}
    bus = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--nopidfile", f"--address={address}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        **ids,  # type: ignore[arg-type]
    )
    deadline = time.monotonic() + 20
    while not (directory / "bus").exists():
        if time.monotonic() > deadline or bus.poll() is not None:
            bus.kill()
            raise AssertionError("the session bus did not start")
        time.sleep(0.02)
    out = directory / "notifications.jsonl"
    server = subprocess.Popen(
        [python, "-m", "tests.notify_desktop", address, str(out)],
        env=env,
        cwd=str(Path(__file__).resolve().parent.parent),
        **ids,  # type: ignore[arg-type]
    )
    desktop = Desktop(address, out, [bus, server])
    while not out.exists():
        if time.monotonic() > deadline or server.poll() is not None:
            desktop.stop()
            raise AssertionError("the notification server stand-in did not start")
        time.sleep(0.02)
    return desktop


@pytest.fixture
def desktop(short_dir: Path) -> Iterator[Desktop]:
    """A session bus with a notification server, as the test's own user."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    found = start_desktop(short_dir, sys.executable, env)
    yield found
    found.stop()


CARD = """<!doctype html><meta charset="utf-8"><style>
body {{ margin: 0; background: #2e3440; font: 15px/1.35 "DejaVu Sans", sans-serif; }}
.card {{ position: absolute; top: 18px; right: 18px; width: 380px; padding: 14px 16px;
  background: #3b4252; color: #eceff4; border-radius: 10px; border-left: 5px solid {edge};
  box-shadow: 0 6px 22px rgba(0,0,0,.45); }}
.app {{ font-size: 12px; color: #a3b1c9; margin-bottom: 4px; }}
.summary {{ font-weight: bold; margin-bottom: 4px; }}
</style><div class="card"><div class="app">{app} · now</div>
<div class="summary">{summary}</div><div class="body">{body}</div></div>"""


def render(record: dict[str, Any], png: Path) -> None:
    """Draw `record` as a desktop's notification bubble, through headless chromium."""
    import html

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")
    png = png.resolve()
    page = png.with_suffix(".html")
    edge = "#d08770" if record.get("urgency") == 2 else "#88c0d0"
    page.write_text(
        CARD.format(
            edge=edge,
            app=html.escape(record["app"]),
            summary=html.escape(record["summary"]),
            body=record["body"],  # escaped by the sender, as a server shows markup
        )
    )
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={png}",
            "--window-size=460,175",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    page.unlink()


if __name__ == "__main__":
    if sys.argv[1] == "--render":
        render(json.loads(sys.argv[2]), Path(sys.argv[3]))
    else:
        serve(sys.argv[1], Path(sys.argv[2]))
