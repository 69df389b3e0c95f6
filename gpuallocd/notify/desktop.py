"""The user's desktop: one `Notify` call to org.freedesktop.Notifications on the session bus
of the user who runs the notifier (jeepney, pure Python; the daemon never connects to a
user's bus).

Notification servers read a subset of HTML in the body: `&`, `<` and `>` are escaped, so a
label cannot make a link or hide text; the summary is plain text on one line.
"""

from __future__ import annotations

import html
import os
from typing import Any

from gpuallocd.notify.http_send import DeliveryError
from gpuallocd.notify.payload import MAX_BODY, one_line, title_of

__all__ = ["URGENT_KINDS", "send_desktop", "session_bus_address"]

URGENT_KINDS = frozenset({"ending", "revoked", "gpu-unhealthy"})
TIMEOUT_SECONDS = 10.0
APP_NAME = "gpuallocd"


def session_bus_address() -> str:
    """$DBUS_SESSION_BUS_ADDRESS, else the bus of the user's systemd session."""
    found = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    if found:
        return found
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return f"unix:path={runtime}/bus"


def send_desktop(notice: dict[str, Any], *, timeout: float = TIMEOUT_SECONDS) -> int:
    """Show the notice; the id the notification server gave it."""
    from jeepney import DBusAddress, new_method_call
    from jeepney.io.blocking import open_dbus_connection
    from jeepney.wrappers import DBusErrorResponse, unwrap_msg

    server = DBusAddress(
        "/org/freedesktop/Notifications",
        bus_name="org.freedesktop.Notifications",
        interface="org.freedesktop.Notifications",
    )
    urgency = 2 if notice.get("kind") in URGENT_KINDS else 1
    body = html.escape(one_line(str(notice.get("body", "")), MAX_BODY), quote=False)
    call = new_method_call(
        server,
        "Notify",
        "susssasa{sv}i",
        (APP_NAME, 0, "", title_of(notice), body, [], {"urgency": ("y", urgency)}, -1),
    )
    try:
        connection = open_dbus_connection(bus=session_bus_address())
    except (OSError, ValueError, KeyError) as exc:
        raise DeliveryError(f"no session bus to reach: {exc}") from None
    try:
        reply = connection.send_and_get_reply(call, timeout=timeout)
        return int(unwrap_msg(reply)[0])
    except TimeoutError:
        raise DeliveryError(f"no notification server answered within {timeout:g} s") from None
    except DBusErrorResponse as exc:
        raise DeliveryError(f"the notification server refused: {exc.name}") from None
    finally:
        connection.close()
