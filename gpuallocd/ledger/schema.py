"""The ledger's tables.

No unit (a whole GPU or a MIG instance) can be in two active leases: `lease_gpus` has a
partial unique index on `gpu_uuid` over the active rows that are not memory shares, so
SQLite itself refuses a double booking whatever the Python above it does. Memory shares
obey another invariant, held by triggers (`UNIT_TRIGGERS`) in the same transaction: the
active shares of a GPU sum to at most its `share_capacity_bytes` (its memory less the
reserve; NULL: not shared), and a whole-GPU lease never overlaps a share or an instance of
the same GPU. An ended row can never become active again, so checks at insert suffice.
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
    "UNIT_TRIGGERS",
    "admin_actions",
    "advance_reservations",
    "drains",
    "energy_use",
    "gpus",
    "history",
    "idle_spells",
    "lease_gpus",
    "lease_requests",
    "leases",
    "meta",
    "metadata",
    "notices",
    "notify_reports",
    "notify_settings",
    "pending_cleanups",
    "power_caps",
    "preemptible_leases",
    "preemptions",
    "reservation_events",
    "use_marks",
]

# A change to any table, column, index or trigger below is a new version, with its
# migration in migrations.py (tests/test_ledger_schema_versions.py holds the two together).
SCHEMA_VERSION = 9

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
    Column("parent_uuid", String),  # a MIG instance's GPU
    Column("share_capacity_bytes", Integer),  # memory shares may sum to this; NULL: not shared
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
    Column("on_revoke", String, nullable=False, server_default="notify"),  # or "terminate"
    Column("follow_work", Boolean, nullable=False, server_default="0"),
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
    Column("kind", String, nullable=False, server_default="whole"),  # whole, mig, share
    Column("gpu_of", String),  # the physical GPU: gpu_uuid, or a MIG instance's parent
    Column("memory_bytes", Integer),  # a share's size
    Column("profile", String),  # a MIG instance's profile
    Column("fraction", Float, nullable=False, server_default="1.0"),
    Column("cap_mw", Integer),  # the power cap set on this GPU for the lease; NULL: none
    Index(
        "one_active_lease_per_gpu",
        "gpu_uuid",
        unique=True,
        sqlite_where=text("active = 1 AND kind != 'share'"),
    ),
    Index("active_units_by_gpu", "gpu_of", sqlite_where=text("active = 1")),
)

UNIT_TRIGGERS = (
    """CREATE TRIGGER IF NOT EXISTS whole_gpu_excludes_its_parts
    BEFORE INSERT ON lease_gpus
    WHEN NEW.active = 1 AND NEW.kind = 'whole' AND EXISTS (
        SELECT 1 FROM lease_gpus
        WHERE active = 1 AND kind != 'whole' AND gpu_of = NEW.gpu_of)
    BEGIN SELECT RAISE(ABORT, 'the GPU is partly leased (shares or MIG instances)'); END""",
    """CREATE TRIGGER IF NOT EXISTS part_excludes_its_whole_gpu
    BEFORE INSERT ON lease_gpus
    WHEN NEW.active = 1 AND NEW.kind != 'whole' AND EXISTS (
        SELECT 1 FROM lease_gpus
        WHERE active = 1 AND kind = 'whole' AND gpu_uuid = NEW.gpu_of)
    BEGIN SELECT RAISE(ABORT, 'the GPU is leased whole'); END""",
    """CREATE TRIGGER IF NOT EXISTS shares_fit_their_gpu
    BEFORE INSERT ON lease_gpus
    WHEN NEW.active = 1 AND NEW.kind = 'share' AND (
        NEW.memory_bytes IS NULL OR NEW.memory_bytes <= 0
        OR NEW.memory_bytes + (
            SELECT COALESCE(SUM(memory_bytes), 0) FROM lease_gpus
            WHERE active = 1 AND kind = 'share' AND gpu_of = NEW.gpu_of)
        > COALESCE((SELECT share_capacity_bytes FROM gpus WHERE uuid = NEW.gpu_of), 0))
    BEGIN SELECT RAISE(ABORT, 'the shares would exceed the GPU''s shareable memory'); END""",
    """CREATE TRIGGER IF NOT EXISTS ended_units_stay_ended
    BEFORE UPDATE OF active ON lease_gpus
    WHEN NEW.active = 1 AND OLD.active = 0
    BEGIN SELECT RAISE(ABORT, 'an ended lease stays ended'); END""",
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

# Advance reservations (docs/scheduling.md): GPUs held for a user or a group in a window.
advance_reservations = Table(
    "advance_reservations",
    metadata,
    Column("id", String, primary_key=True),
    Column("gpus", Text, nullable=False),  # UUIDs, comma-separated
    Column("start_at", Float, nullable=False),
    Column("end_at", Float, nullable=False),
    Column("user", String),
    Column("group", String),
    Column("reason", Text, nullable=False),
    Column("by_uid", Integer, nullable=False),
    Column("by_user", String, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("cancelled_at", Float),
    Index("advance_reservations_by_end", "end_at"),
)

# Each reservation's life: created, started, ended, cancelled, with the actor.
reservation_events = Table(
    "reservation_events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("reservation_id", String, ForeignKey("advance_reservations.id"), nullable=False),
    Column("event", String, nullable=False),
    Column("actor_uid", Integer, nullable=False),
    Column("at", Float, nullable=False),
    Column("detail", Text),
    Index("reservation_events_by_reservation", "reservation_id"),
)

# Processes found using a GPU (or MIG instance) without a lease, and what was done about
# each: reported, terminated, killed, adopted (docs/enforcement.md). `lease_id` is the lease
# an adoption made, or the lease of the unit's holder when someone else holds it.
unleased_use = Table(
    "unleased_use",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("action", String, nullable=False),
    Column("gpu_uuid", String, nullable=False),
    Column("unit_uuid", String, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("uid", Integer),
    Column("user", String, nullable=False),
    Column("command", String, nullable=False),
    Column("lease_id", String),
    Column("detail", Text, nullable=False),
    Index("unleased_use_by_time", "at"),
)

# The client's request id of each active lease that gave one: a retry with the same id after
# a crash between the grant's commit and its answer gets the same lease (allocator/
# request_ids.py). Written in the grant's transaction; the row goes when the lease ends.
lease_requests = Table(
    "lease_requests",
    metadata,
    Column("lease_id", String, primary_key=True),
    Column("owner_uid", Integer, nullable=False),
    Column("request_id", String, nullable=False),
    sqlite_with_rowid=False,  # one b-tree, not a table and its key's index: one page a grant
)

# Work owed to the machine after a lease ends (model/cleanup.py), written in the transaction
# that ends the lease and deleted once done; a restart finds what is left and finishes it.
# The same work is owed once: a user who frees the same GPU again and again while its
# cleanup fails adds no row (the table stays as small as the distinct work owed).
pending_cleanups = Table(
    "pending_cleanups",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String, nullable=False),
    Column("target", String, nullable=False),
    Column("payload", Text, nullable=False, default="{}"),
    Column("lease_id", String),
    Column("created_at", Float, nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_try", Float, nullable=False),
    Column("last_error", Text),
    Index("one_pending_cleanup", "kind", "target", "payload", unique=True),
)

# Energy drawn, one row per reading of a lease's GPUs (docs/accounting.md): the joules since
# the previous reading, charged to the lease's owner; `estimate` where the lease held part of a
# GPU (a share, a MIG instance). Rows with no lease are unleased use charged to its owner,
# with the GPU-seconds it held. No foreign key: the rows of a purged lease go with it.
energy_use = Table(
    "energy_use",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("lease_id", String),
    Column("owner_uid", Integer, nullable=False),
    Column("owner_name", String, nullable=False),
    Column("at", Float, nullable=False),
    Column("joules", Float, nullable=False),
    Column("estimate", Boolean, nullable=False),
    Column("gpu_seconds", Float, nullable=False, server_default="0"),
    Index("energy_use_by_lease", "lease_id"),
    Index("energy_use_by_time", "at"),
    Index("energy_use_by_owner", "owner_uid", "at"),
)

# Power limits owed back (allocator/power/caps.py): per GPU the limit to put back once no lease
# caps it, written by the grant that capped it first (`lease_id`, `set_mw`: that lease and its
# cap, for the admin's eye); the cap of each lease is on its units (`lease_gpus.cap_mw`). A row
# lives until the limit is put back, so a daemon killed before it puts it back at its next
# start. Kept apart from other pending work: it is read once, at start.
power_caps = Table(
    "power_caps",
    metadata,
    Column("gpu_uuid", String, primary_key=True),
    Column("lease_id", String, primary_key=True),
    Column("set_mw", Integer, nullable=False),
    Column("restore_mw", Integer, nullable=False),
)

# The per-user feed of notices (model/notice.py): each fact told once per user, by its `key`
# (the unique index), written in the transaction of the transition that causes it where there
# is one. AUTOINCREMENT: a number is never given twice, even after a purge empties the table,
# so a reader's cursor never skips a notice.
notices = Table(
    "notices",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("uid", Integer, nullable=False),
    Column("user", String, nullable=False),
    Column("kind", String, nullable=False),
    Column("key", String, nullable=False),
    Column("lease_id", String),
    Column("at", Float, nullable=False),
    Column("title", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("data", Text, nullable=False),
    Index("one_notice_per_key", "uid", "key", unique=True),
    Index("notices_by_uid", "uid", "seq"),
    Index("notices_by_time", "at"),
    sqlite_autoincrement=True,
)

# Each user's warning thresholds before a lease ends (`gpuallocctl notify thresholds`).
notify_settings = Table(
    "notify_settings",
    metadata,
    Column("uid", Integer, primary_key=True),
    Column("thresholds", String, nullable=False),  # seconds, comma-separated, largest first
    Column("updated_at", Float, nullable=False),
)

# Each active lease idle at the last sample, and since when the daemon has seen it idle: the
# name of its warnings before idle reclaim (`ending:LEASE:idle-reclaim:SINCE:THRESHOLD`), kept
# so that a spell that runs on across a restart is still the one that was warned. The idle
# time itself starts again at a restart (site/idle.py); a spell ends when a sample shows
# the lease busy, or the lease ends.
idle_spells = Table(
    "idle_spells",
    metadata,
    Column("lease_id", String, ForeignKey("leases.id"), primary_key=True),
    Column("since", Float, nullable=False),
)

# The last delivery to each channel of each user, as their notifier reported it (kind, ok or
# the error; never the target or a secret), for `notify list`, `doctor` and the dashboard.
notify_reports = Table(
    "notify_reports",
    metadata,
    Column("uid", Integer, primary_key=True),
    Column("channel", String, primary_key=True),
    Column("kind", String, nullable=False),
    Column("at", Float, nullable=False),
    Column("ok", Boolean, nullable=False),
    Column("error", Text),
    Column("failures", Integer, nullable=False),  # in a row; 0 after a delivery
    Column("last_ok_at", Float),
)

# The terms of each preemptible lease (docs/preemption.md), written in its grant's transaction,
# and its job's last acknowledged checkpoint (the path only recorded: the daemon never opens
# it). `requeue_of`: the preempted lease whose place in the queue its request kept.
preemptible_leases = Table(
    "preemptible_leases",
    metadata,
    Column("lease_id", String, ForeignKey("leases.id"), primary_key=True),
    Column("min_runtime_seconds", Float, nullable=False),
    Column("lead_seconds", Float, nullable=False),
    Column("grace_seconds", Float, nullable=False),
    Column("signal", String, nullable=False),
    Column("queued_since", Float, nullable=False),
    Column("requeue_of", String),
    Column("checkpoint_at", Float),
    Column("checkpoint_path", Text),
    Index("preemptible_leases_by_requeue", "requeue_of"),
)

# One preemption per preempted lease, from its warning to its end: the deadline and the
# state live here, so a daemon killed between the warning and the kill resumes it with the
# same deadline. Times are wall-clock.
preemptions = Table(
    "preemptions",
    metadata,
    Column("lease_id", String, ForeignKey("leases.id"), primary_key=True),
    Column("owner_uid", Integer, nullable=False),
    Column("owner_name", String, nullable=False),
    Column("trigger", String, nullable=False),  # request, reservation, admin
    Column("for_uid", Integer),
    Column("for_user", String, nullable=False),
    Column("explanation", Text, nullable=False),
    Column("decided_at", Float, nullable=False),
    Column("signal_at", Float, nullable=False),
    Column("deadline_at", Float, nullable=False),
    Column("signal", String, nullable=False),
    Column("state", String, nullable=False),  # warned, signalled, acknowledged, killed, ended
    Column("signalled_at", Float),
    Column("ended_at", Float),
    Column("acknowledged_at", Float),
    Column("checkpoint", Text),
    Column("late", Boolean, nullable=False, default=False),
    Index("open_preemptions", "state", sqlite_where=text("state IN ('warned', 'signalled')")),
)

# Each user's running totals (ledger/totals.py): one row per user per minute in which they
# changed, written in the transaction of the grant, end or energy reading that changed them.
# Derived from `leases` and `energy_use`, and rebuilt from them by the migration that adds the
# table and by recovery; budgets, `usage` and the dashboard read two rows per user.
use_marks = Table(
    "use_marks",
    metadata,
    Column("owner_uid", Integer, primary_key=True),
    Column("minute", Integer, primary_key=True),  # at // 60
    Column("at", Float, nullable=False),  # the minute's last change
    Column("owner_name", String, nullable=False),
    Column("gpus", Float, nullable=False),  # GPUs held from `at` on
    Column("gpu_seconds", Float, nullable=False),  # the totals at `at`, from here on
    Column("leases", Integer, nullable=False),
    Column("waited_seconds", Float, nullable=False),
    Column("joules", Float, nullable=False),  # under leases
    Column("estimates", Integer, nullable=False),  # readings under leases that are estimates
    Column("unleased_joules", Float, nullable=False),
    Column("unleased_seconds", Float, nullable=False),
    sqlite_with_rowid=False,  # one b-tree: a user's marks lie together, in time order
)
