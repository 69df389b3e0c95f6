"""A lease's id, as the daemon makes it and a process carries it: the one home of the id's
format and of the environment variable that names a process's lease (the daemon imports
both from here; the client is the package below it)."""

from __future__ import annotations

import re

__all__ = ["LEASE_ID", "LEASE_ID_BYTES", "LEASE_ID_VARIABLE"]

# `gpu_lease`, `run` and `shell` put it in the environment of what runs in a lease.
LEASE_ID_VARIABLE = "GPUALLOCD_LEASE_ID"
LEASE_ID_BYTES = 6  # random bytes of an id, written as twice as many lower-case hex digits
LEASE_ID = re.compile(f"[0-9a-f]{{{2 * LEASE_ID_BYTES}}}")
