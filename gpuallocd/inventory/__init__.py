"""Backends that know the node's GPUs: a topology file, or NVML on a real machine."""

from __future__ import annotations

from gpuallocd.inventory.base import DriverCalls, Inventory, XidCounting
from gpuallocd.inventory.file import FileInventory
from gpuallocd.inventory.select import open_inventory

__all__ = ["DriverCalls", "FileInventory", "Inventory", "XidCounting", "open_inventory"]
