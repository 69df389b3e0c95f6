"""What to do next, added to the startup errors people meet first.

A normal user who starts `gpuallocd` as it is configured for the service cannot write
`/run/gpuallocd` or `/var/lib/gpuallocd`: say which options to give. A machine without GPUs
cannot open NVML: list the bundled example topologies it can run on instead.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.errors import GpuallocError, HardwareUnavailable, StateUnusable
from gpuallocd.host import users
from gpuallocd.inventory.file import bundled_examples

__all__ = ["hint_for", "user_paths"]

_HARDWARE_INVENTORIES = ("nvml", "amdsmi")


def user_paths() -> tuple[str, str]:
    """A socket and a state directory a normal user may write: the XDG places, else /tmp."""
    account = users.account(os.geteuid())
    name, home = (account.name, account.home) if account else (str(os.geteuid()), "/")
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/gpuallocd-{name}"
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path(home, ".local", "state"))
    return f"{runtime}/gpuallocd.sock", f"{state_home}/gpuallocd"


def _denied(exc: BaseException) -> bool:
    cause = exc.__cause__
    return isinstance(cause, OSError) and cause.errno in (errno.EACCES, errno.EPERM, errno.EROFS)


def _permission_hint() -> str:
    socket, state_dir = user_paths()
    return (
        "as a normal user, give paths you may write: "
        f"gpuallocd --socket {socket} --state-dir {state_dir} "
        "(the service runs as root with the defaults; see docs/configuration.md)"
    )


def _examples_hint() -> str:
    names = ", ".join(bundled_examples())
    return f"bundled examples (--inventory example:NAME): {names}"


def hint_for(exc: GpuallocError, config: DaemonConfig | None) -> str | None:
    """A line saying how to get past `exc`, where there is one."""
    if isinstance(exc, StateUnusable) and _denied(exc) and os.geteuid() != 0:
        return _permission_hint()
    inventory = config.inventory if config is not None else "nvml"
    if isinstance(exc, HardwareUnavailable) and inventory in _HARDWARE_INVENTORIES:
        return _examples_hint()
    return None
