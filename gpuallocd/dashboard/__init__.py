"""A read-only web dashboard of the node, served on `dashboard_listen` (docs/dashboard.md)."""

from __future__ import annotations

from gpuallocd.dashboard.address import is_loopback, parse_dashboard_address
from gpuallocd.dashboard.server import DashboardServer

__all__ = ["DashboardServer", "is_loopback", "parse_dashboard_address"]
