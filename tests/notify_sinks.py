"""Real receivers for the notifier's tests: a webhook sink on loopback that checks each
delivery's HMAC signature (and may fail the first attempts, or never answer), and an SMTP
sink (aiosmtpd) that a real `sendmail` (msmtp) relays to, configured as the user it runs as."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuallocd.notify.signing import SIGNATURE_HEADER, verify


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes
    signed: bool | None  # None: no secret to check against

    @property
    def json(self) -> dict[str, Any]:
        return dict(json.loads(self.body))


@dataclass
class WebhookSink:
    """POSTs to http://127.0.0.1:PORT/...: the first `fail_first` attempts get 503; with
    `hang`, nothing is ever answered (the connection stays open)."""

    secret: str = ""
    fail_first: int = 0
    hang: bool = False
    attempts: int = 0
    deliveries: list[Delivery] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _released: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks/gpu"

    def start(self) -> WebhookSink:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                sink.attempts += 1
                if sink.hang:
                    sink._released.wait(60)
                    return
                if sink.attempts <= sink.fail_first:
                    self.send_response(503)
                    self.end_headers()
                    return
                header = self.headers.get(SIGNATURE_HEADER, "")
                signed = verify(sink.secret, header, body, time.time()) if sink.secret else None
                sink.deliveries.append(Delivery(dict(self.headers), body, signed))
                self.send_response(204 if signed is not False else 401)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def kinds(self) -> list[str]:
        return [d.json["kind"] for d in self.deliveries]


@pytest.fixture
def webhook_sink() -> Iterator[WebhookSink]:
    sink = WebhookSink().start()
    yield sink
    sink.stop()


class MailSink:
    """An SMTP server on loopback (aiosmtpd) that keeps every message it is handed."""

    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[EmailMessage] = []
        sink = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
                parsed = message_from_bytes(envelope.content, policy=policy.default)
                sink.messages.append(parsed)  # type: ignore[arg-type]
                return "250 OK"

        self.port = _free_port()
        self._controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    def start(self) -> MailSink:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    def subjects(self) -> list[str]:
        return [str(m["Subject"]) for m in self.messages]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def sendmail_or_skip() -> str:
    """The MTA's sendmail, msmtp's (CI installs msmtp-mta), or a skip saying why."""
    found = shutil.which("sendmail") or "/usr/sbin/sendmail"
    if not os.path.exists(found) or shutil.which("msmtp") is None:
        pytest.skip("no msmtp sendmail: apt-get install msmtp-mta (as .ci/run does)")
    return found


def write_msmtprc(home: Path, port: int, uid: int | None = None, gid: int | None = None) -> Path:
    """`~/.msmtprc` of the user whose home is `home`: relay everything to the sink."""
    path = home / ".msmtprc"
    path.write_text(
        f"account default\nhost 127.0.0.1\nport {port}\nfrom notices@localhost\nauth off\ntls off\n"
    )
    path.chmod(0o600)
    if uid is not None and gid is not None:
        os.chown(path, uid, gid)
    return path


@pytest.fixture
def mail_sink() -> Iterator[MailSink]:
    pytest.importorskip("aiosmtpd", reason="the test extra's aiosmtpd is not installed")
    sink = MailSink().start()
    yield sink
    sink.stop()
