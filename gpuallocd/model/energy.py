"""Energy drawn under leases (and by unleased use), as accounting records it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["JOULES_PER_KWH", "EnergyPrice", "EnergyUse", "LeaseEnergy"]

JOULES_PER_KWH = 3_600_000.0


@dataclass(frozen=True, slots=True)
class EnergyUse:
    """Energy drawn since the previous reading, charged to `owner_uid`.

    `estimate`: the owner held part of a GPU (a share, a MIG instance), so the joules are the
    GPU's measured energy times that part. `lease_id` None: unleased use, which also counts
    the `gpu_seconds` it held.
    """

    lease_id: str | None
    owner_uid: int
    owner_name: str
    at: float
    joules: float
    estimate: bool
    gpu_seconds: float = 0.0

    def to_row(self) -> dict[str, Any]:
        return {
            "lease_id": self.lease_id,
            "owner_uid": self.owner_uid,
            "owner_name": self.owner_name,
            "at": self.at,
            "joules": self.joules,
            "estimate": self.estimate,
            "gpu_seconds": self.gpu_seconds,
        }


@dataclass(frozen=True, slots=True)
class LeaseEnergy:
    """A lease's energy so far: joules, and whether any of it is an estimate."""

    joules: float
    estimate: bool

    @property
    def kwh(self) -> float:
        return self.joules / JOULES_PER_KWH

    def to_json(self) -> dict[str, Any]:
        return {"joules": self.joules, "kwh": self.kwh, "estimate": self.estimate}


@dataclass(frozen=True, slots=True)
class EnergyPrice:
    """What a kWh costs (the site's `energy_price_per_kwh`, in `currency`)."""

    per_kwh: float
    currency: str = ""

    def cost(self, kwh: float) -> float:
        return round(kwh * self.per_kwh, 4)

    def to_json(self) -> dict[str, Any]:
        return {"per_kwh": self.per_kwh, "currency": self.currency}
