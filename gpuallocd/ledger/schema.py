"""The ledger's tables.

No GPU can be in two active leases: `lease_gpus` has a partial unique index on
`gpu_uuid` over the rows whose `active` is 1, so SQLite itself refuses a double booking
whatever the Python above it does.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)

__all__ = [
    "SCHEMA_VERSION",
    "admin_actions",
    "drains",
    "gpus",
    "history",
    "lease_gpus",
    "leases",
    "meta",
    "metadata",
]

SCHEMA_VERSION = 3

metadata = MetaData()

meta = Table(
    "meta",
    metadata,
    Column("key", String, primary_key=True),
    Column("value", String, nullable=False),
)

gpus = Table(
    "gpus",
    metadata,
    Column("uuid", String, primary_key=True),
    Column("gpu_index", Integer, nullable=False),
    Column("name", String, nullable=False),
    Column("present", Boolean, nullable=False),
    Column("first_seen", Float, nullable=False),
    Column("last_seen", Float, nullable=False),
)

leases = Table(
    "leases",
    metadata,
    Column("id", String, primary_key=True),
    Column("owner_uid", Integer, nullable=False),
    Column("owner_name", String, nullable=False),
    Column("pid", Integer),
    Column("label", String),
    Column("policy", String, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("state", String, nullable=False),
    Column("ended_at", Float),
    Column("bound", Boolean, nullable=False, default=False),
    Column("pid_start_time", Integer),
    Column("waited_seconds", Float, nullable=False, default=0.0),
    Index("leases_by_state", "state"),
    Index("leases_by_end", "ended_at"),
    Index("leases_by_owner", "owner_uid", "ended_at"),
)

lease_gpus = Table(
    "lease_gpus",
    metadata,
    Column("lease_id", String, ForeignKey("leases.id"), primary_key=True),
    Column("gpu_uuid", String, ForeignKey("gpus.uuid"), primary_key=True),
    Column("gpu_index", Integer, nullable=False),
    Column("position", Integer, nullable=False),
    Column("active", Boolean, nullable=False),
    Index(
        "one_active_lease_per_gpu",
        "gpu_uuid",
        unique=True,
        sqlite_where=text("active = 1"),
    ),
)

history = Table(
    "history",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("lease_id", String, ForeignKey("leases.id"), nullable=False),
    Column("event", String, nullable=False),
    Column("actor_uid", Integer, nullable=False),
    Column("at", Float, nullable=False),
    Column("detail", Text),
    Index("history_by_lease", "lease_id"),
)

# GPUs an admin took out of service; a row lives until the GPU is undrained.
drains = Table(
    "drains",
    metadata,
    Column("gpu_uuid", String, primary_key=True),
    Column("reason", Text, nullable=False),
    Column("by_uid", Integer, nullable=False),
    Column("by_user", String, nullable=False),
    Column("at", Float, nullable=False),
)

# Every admin action: who (uid and name) did what (revoke, drain, undrain) to what, and why.
admin_actions = Table(
    "admin_actions",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("action", String, nullable=False),
    Column("target", String, nullable=False),
    Column("actor_uid", Integer, nullable=False),
    Column("actor", String, nullable=False),
    Column("reason", Text),
    Index("admin_actions_by_time", "at"),
)
