"""Mail through the local MTA: the message handed to `sendmail -t -oi` on its standard input,
as the user who runs the notifier (the MTA says who sent it).

The recipient is an address checked when the channel was added (channels.py); the subject
is the notice's title on one line (payload.py): no line end a user controls can reach a
header, and Python's mail policy refuses one if it ever did.
"""

from __future__ import annotations

import email.policy
import os
import shutil
import subprocess
from email.message import EmailMessage
from typing import Any

from gpuallocd.notify.channels import checked_address
from gpuallocd.notify.http_send import DeliveryError
from gpuallocd.notify.payload import one_line, text_of, title_of

__all__ = ["DEFAULT_SENDMAIL", "message_of", "send_mail", "sendmail_path"]

DEFAULT_SENDMAIL = "/usr/sbin/sendmail"
TIMEOUT_SECONDS = 30.0


def sendmail_path(configured: str | None = None) -> str:
    """The MTA's `sendmail`: the one configured, else /usr/sbin/sendmail, else on PATH."""
    if configured:
        return configured
    if os.access(DEFAULT_SENDMAIL, os.X_OK):
        return DEFAULT_SENDMAIL
    return shutil.which("sendmail") or DEFAULT_SENDMAIL


def message_of(address: str, notice: dict[str, Any]) -> EmailMessage:
    message = EmailMessage(policy=email.policy.SMTP)
    message["To"] = checked_address(address)
    message["Subject"] = f"[gpuallocd] {title_of(notice)}"
    message["X-Gpuallocd-Notice"] = one_line(str(notice.get("key", "")), 200)
    message["Auto-Submitted"] = "auto-generated"
    message.set_content(text_of(notice))
    return message


def send_mail(
    address: str,
    notice: dict[str, Any],
    *,
    sendmail: str | None = None,
    timeout: float = TIMEOUT_SECONDS,
) -> None:
    """Hand the message to the MTA; DeliveryError with its exit status and first words."""
    command = [sendmail_path(sendmail), "-t", "-oi"]
    try:
        done = subprocess.run(
            command,
            input=message_of(address, notice).as_bytes(),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DeliveryError(f"sendmail did not finish within {timeout:g} s") from None
    except OSError as exc:
        raise DeliveryError(f"cannot run {command[0]}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").replace(address, "[address]")
        said = one_line(said.strip(), 200)  # reported to the daemon: never the target
        raise DeliveryError(f"sendmail exited with {done.returncode}: {said}")
