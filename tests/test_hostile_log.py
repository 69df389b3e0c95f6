"""Hostile use of the daemon's log: what a user controls (here a process name) reaches the
log escaped, never as the raw bytes a terminal would act on. A real daemon process, a real
user's process on a GPU of the recorded machine."""

from __future__ import annotations

import logging
import sys

from gpuallocd.daemon.logformat import LOG_FORMAT, EscapingFormatter
from tests.harness import DaemonPaths, ProcessDaemon, wait_for
from tests.system_users import SystemUsers
from tests.unleased_helpers import Node, node

__all__ = ["node"]

UUID3 = "GPU-f06d330d-af21-5a36-84a7-d3d20d41fb7f"
# ESC ] 0 ; ... BEL retitles a terminal; ESC [ 2 J clears it. The kernel keeps 15 bytes.
NAMED = (
    "import ctypes; ctypes.CDLL(None).prctl(15, b'\\x1b]0;pwn\\x07\\x1b[2J', 0, 0, 0); "
    "print('ready', flush=True); import time; time.sleep(600)"
)


def test_a_process_name_of_control_bytes_is_logged_escaped(
    paths: DaemonPaths, node: Node, system_users: SystemUsers
) -> None:
    """bob names his process ESC ] 0;pwn BEL ESC [2J and runs it on a GPU without a lease:
    the daemon's log reports it with the bytes written as escapes, and holds no ESC or BEL."""
    daemon = ProcessDaemon(paths, inventory=node.inventory, sample_interval_seconds=0.1)
    daemon.start()
    try:
        pid = node.start("bob", NAMED)
        node.put(UUID3, pid)
        wait_for(lambda: f"pid {pid} of" in daemon.stderr(), 30, what="the report in the log")
    finally:
        daemon.stop()
    raw = daemon.log_path.read_bytes()
    line = next(x for x in raw.splitlines() if f"pid {pid} of".encode() in x)
    assert b"\x1b" not in raw and b"\x07" not in raw
    assert b"(\\x1b]0;pwn\\x07\\x1b[2J" in line


def test_a_traceback_keeps_its_lines_and_escapes_their_bytes() -> None:
    """An exception whose message quotes a user's bytes: the message and every line of the
    traceback are escaped; the traceback's line breaks stay."""
    record = logging.LogRecord("gpuallocd", logging.ERROR, "", 0, "saw %s", ("a\x1b[2Jb",), None)
    try:
        raise ValueError("bad name \x07\x1b]0;x")
    except ValueError:
        record.exc_info = sys.exc_info()
    text = EscapingFormatter(LOG_FORMAT).format(record)
    assert "\x1b" not in text and "\x07" not in text
    assert text.startswith("gpuallocd: ERROR saw a\\x1b[2Jb\nTraceback")
    assert text.endswith("ValueError: bad name \\x07\\x1b]0;x")
