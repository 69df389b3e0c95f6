"""Crash points for tests: the daemon kills itself at a named point, as a power cut would.

FOR TESTS ONLY. Nothing happens unless two environment variables are both set when the
daemon starts: `GPUALLOCD_TEST_CRASH_AT` names the point, and `GPUALLOCD_TEST_FAULTS` must
be exactly `kill-this-daemon` (one variable left over in a unit file arms nothing). When
armed, the daemon says so in its log at start. The points:

    cap-recorded      a grant with a power cap is durable (the cap and the limit to put back
                      recorded); the cap may not be set yet
    after-commit      a grant is durable in the ledger; its answer is not yet sent
    after-reply       the grant's answer was written to the client's connection
    after-preempt-warning  a preemption and its warning are durable; its signal has not gone
    during-recovery   `gpuallocd --recover` has built the new ledger and set the damaged
                      one's write-ahead log aside, but not yet put the new ledger in place

The kill is SIGKILL to the daemon's own process: no handler, no cleanup, no flush.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping

__all__ = ["POINTS", "arm", "armed_point", "crash_point"]

log = logging.getLogger(__name__)

POINTS = frozenset(
    {"cap-recorded", "after-commit", "after-reply", "after-preempt-warning", "during-recovery"}
)
CRASH_AT = "GPUALLOCD_TEST_CRASH_AT"
FAULTS = "GPUALLOCD_TEST_FAULTS"
CONSENT = "kill-this-daemon"

_armed: str | None = None


def armed_point(environ: Mapping[str, str]) -> str | None:
    """The point `environ` arms, or None (both variables, the consent word, a known point)."""
    point = environ.get(CRASH_AT)
    if point is None or environ.get(FAULTS) != CONSENT:
        return None
    return point if point in POINTS else None


def arm(environ: Mapping[str, str] | None = None) -> str | None:
    """Read the environment once (at start); the point armed, if any, is logged loudly."""
    global _armed
    _armed = armed_point(os.environ if environ is None else environ)
    if _armed is not None:
        log.warning("TEST FAULT ARMED: this daemon kills itself at %s (%s)", _armed, CRASH_AT)
    return _armed


def crash_point(name: str) -> None:
    """Kill this process now if the point `name` is armed; else nothing (one comparison)."""
    if _armed is not None and _armed == name:
        os.kill(os.getpid(), signal.SIGKILL)
