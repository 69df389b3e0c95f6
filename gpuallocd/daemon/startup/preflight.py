"""Every reason to refuse a start that can be known before anything is written.

Start-up writes: the state directory, its lock and ledger, the socket's directory
(`/run/gpuallocd`). A daemon refused after those were made leaves them behind for nothing, and
a warning logged just before the refusal reads as "starting anyway". So the refusals that need
no state come first, in this order: a feature that cannot work with what the daemon holds
(MissingPrivilege), an address of the metrics or the dashboard that is malformed
(ConfigError), the socket already served by another daemon (AlreadyRunning); then the caller
opens the GPU backend (HardwareUnavailable), and only then logs the warnings and prepares the
state.

A TCP port that another program holds is not a refusal: the API is served all the same, and
the port is named in health and `doctor` and tried again (api/tcp_site.py; docs/security.md,
R4-10), so that no local user can keep the daemon from starting by binding its port first.
"""

from __future__ import annotations

import stat
from pathlib import Path

from gpuallocd.api.server import refuse_if_served
from gpuallocd.api.tcp_address import parse_host_port
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.startup.needs import Host, Need, refuse_unmet

__all__ = ["preflight"]


def preflight(config: DaemonConfig, host: Host, activated: bool) -> list[Need]:
    """Raise the first refusal that needs no state; the needs (for the diagnostics)."""
    needs = refuse_unmet(config, host)
    if config.metrics_listen:
        parse_host_port(config.metrics_listen, "metrics_listen", allow_wildcard=True)
    if config.dashboard_listen:
        parse_host_port(config.dashboard_listen, "dashboard_listen", allow_wildcard=False)
    socket_path = Path(config.socket)
    if not activated and _is_socket(socket_path):
        refuse_if_served(socket_path)
    return needs


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False
