"""The allocator's shared parts over one node, made in one place and handed out by name.

The lifecycle grants and ends leases; around it, the queue, the notices, preemption, the
unleased guard and the façade's desks each read some of the same few things: the settings
that decide a grant, the node's view (topology, live state), the quota (limits, budgets and
the admin groups), the drains, the advance reservations' board, and the lease hardware
(energy, power caps, the power budget). `SharedParts.of` makes them over a ledger and a
topology; the composition root (daemon/assembly.py; the recovery's rebuild for its own
lifecycle) hands the bundle to the lifecycle and to the façade, and the façade hands each
desk the parts it uses one by one, as keyword arguments named as the fields here, so that a
desk's constructor says what it reads. Nobody reaches them through the lifecycle
(tests/test_architecture.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuallocd.allocator.leases.node_view import NodeView
from gpuallocd.allocator.leases.specs import AllocatorSettings
from gpuallocd.allocator.power.hardware import LeaseHardware
from gpuallocd.allocator.site.drain import DrainBoard
from gpuallocd.allocator.site.quota import Quota
from gpuallocd.allocator.site.reservation_board import ReservationBoard
from gpuallocd.allocator.site.rules import SiteRules
from gpuallocd.ledger import Ledger
from gpuallocd.model import Topology

__all__ = ["SharedParts"]


@dataclass(frozen=True)
class SharedParts:
    """The shared parts of one node's allocator (each one instance, for the daemon's life)."""

    settings: AllocatorSettings
    node: NodeView
    quota: Quota
    drains: DrainBoard
    reservations: ReservationBoard
    hardware: LeaseHardware

    @classmethod
    def of(
        cls,
        ledger: Ledger,
        topology: Topology,
        *,
        clock: Callable[[], float],
        settings: AllocatorSettings | None = None,
        rules: SiteRules | None = None,
        hardware: LeaseHardware | None = None,
    ) -> SharedParts:
        """The parts over `ledger` and `topology`: the drains and reservations as the ledger
        holds them, the quota under `rules` (none by default), `hardware` where the machine
        has power and energy to read (none by default)."""
        return cls(
            settings=settings or AllocatorSettings(),
            node=NodeView(topology),
            quota=Quota(ledger, clock, rules or SiteRules()),
            drains=DrainBoard(ledger),
            reservations=ReservationBoard(ledger),
            hardware=hardware or LeaseHardware(),
        )
