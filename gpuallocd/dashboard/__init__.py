"""A read-only web dashboard of the node, served on `dashboard_listen` (docs/dashboard.md)."""

from __future__ import annotations

from gpuallocd.dashboard.server import DashboardServer

__all__ = ["DashboardServer"]
