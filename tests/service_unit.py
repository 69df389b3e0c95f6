"""What `systemd/gpuallocd.service` grants the daemon, read from the unit file itself.

Tests that act on other users' processes start the daemon with exactly these capabilities
(`setpriv --bounding-set`), so a hardening change to the unit that breaks a feature fails a
test the same day: the unit and the tests cannot drift apart.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parent.parent / "systemd" / "gpuallocd.service"


def _assignments(text: str, section: str) -> list[tuple[str, str]]:
    """`Key=value` lines of one section, in order, continuation lines joined."""
    found: list[tuple[str, str]] = []
    current = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif current == section and "=" in line:
            key, _, value = line.partition("=")
            found.append((key.strip(), value.strip()))
    return found


def _accumulated(assignments: Sequence[tuple[str, str]], key: str) -> tuple[str, ...]:
    """A list setting as systemd reads it: lines add up, an empty assignment resets, a
    leading `~` inverts (not used by the settings read here, so refused)."""
    values: list[str] = []
    for name, value in assignments:
        if name != key:
            continue
        if not value:
            values = []
            continue
        if value.startswith("~"):
            raise ValueError(f"{key}=~... is not supported by this reader")
        values += value.split()
    return tuple(dict.fromkeys(values))


@dataclass(frozen=True)
class ServiceUnit:
    """The settings of the shipped service unit that the tests hold the daemon to."""

    capabilities: tuple[str, ...]
    address_families: tuple[str, ...]
    read_write_paths: tuple[str, ...]

    @classmethod
    def read(cls, path: Path = SERVICE) -> ServiceUnit:
        service = _assignments(path.read_text(), "Service")
        return cls(
            capabilities=_accumulated(service, "CapabilityBoundingSet"),
            address_families=_accumulated(service, "RestrictAddressFamilies"),
            read_write_paths=_accumulated(service, "ReadWritePaths"),
        )

    def setpriv_prefix(self) -> list[str]:
        """The command that runs a program as root with only the unit's capabilities."""
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("setpriv (util-linux) is not installed: cannot drop capabilities")
        keep = ",".join(f"+{c.lower().removeprefix('cap_')}" for c in self.capabilities)
        bounding = "-all" + (f",{keep}" if keep else "")
        return [setpriv, f"--bounding-set={bounding}", "--inh-caps=-all", "--"]


@functools.cache
def shipped_unit() -> ServiceUnit:
    return ServiceUnit.read()
