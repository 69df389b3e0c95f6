"""The daemon's settings, each declared once: name, type, default and meaning.

`DaemonConfig` is the table. Everything else is derived from its fields: the config file's
keys and their type checks (`loading.py`), the environment variables (`GPUALLOCD_` and the
name in capitals), the daemon's command-line options (`--` and the name with dashes), the
example file `systemd/gpuallocd.toml` and the table in `docs/configuration.md` (both
printed by `gpuallocd --print-config toml|markdown`; a test keeps them equal).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuallocd.allocator import LimitsTable
from gpuallocd.enforcement import DEFAULT_EXEMPT_COMMANDS, MODES, UnleasedModes

__all__ = [
    "DEFAULT_SOCKET",
    "DaemonConfig",
    "Setting",
    "render_markdown",
    "render_toml",
    "sections",
    "settings",
]

DEFAULT_SOCKET = "/run/gpuallocd/gpuallocd.sock"
DEFAULT_STATE_DIR = "/var/lib/gpuallocd"
ENV_PREFIX = "GPUALLOCD_"


def _setting(
    default: Any,
    meaning: str,
    *,
    choices: tuple[str, ...] = (),
    octal: bool = False,
    example: str | None = None,
    minimum: float | None = None,
    unit: str | None = None,
) -> Any:
    """One setting's row. `minimum`: the least value a number may have; `unit`: the unit a
    number counts (`W`), which a file may also write after it (`"1600W"`)."""
    metadata = {
        "meaning": meaning,
        "choices": choices,
        "octal": octal,
        "example": example,
        "minimum": minimum,
        "unit": unit,
    }
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class DaemonConfig:
    """Everything the daemon reads at start."""

    socket: str = _setting(DEFAULT_SOCKET, "the Unix socket to serve on")
    socket_mode: int = _setting(
        0o666,
        "the socket's permissions, set right after bind, before anyone can connect",
        octal=True,
    )
    socket_group: str | None = _setting(
        None,
        "a group to own the socket (with `socket_mode = 0o660`, only its members connect)",
        example='"gpu-users"',
    )
    state_dir: str = _setting(
        DEFAULT_STATE_DIR, "the ledger (`ledger.sqlite3`) and the lock (`gpuallocd.lock`)"
    )
    inventory: str = _setting(
        "nvml",
        "`nvml` for the real GPUs, `amdsmi` for AMD's, a topology file, `example:NAME` for a "
        "bundled one, or a recorded machine `nvml-recording:NAME` / `amd-recording:NAME`",
    )
    default_policy: str = _setting(
        "best-effort", "the policy for requests that name none; checked at start"
    )
    default_ttl_seconds: float = _setting(3600.0, "a lease's lifetime when the request gives none")
    max_ttl_seconds: float = _setting(
        7 * 24 * 3600.0, "the longest TTL a request may ask for (a week)"
    )
    sample_interval_seconds: float = _setting(
        2.0, "how often live GPU state (memory, processes, health) is read"
    )
    driver_call_timeout_seconds: float = _setting(
        10.0,
        "how long a GPU driver call (NVML, amdsmi) may run before health and `doctor` name it "
        "as hung; sampling skips while it hangs and resumes when it answers",
    )
    max_body_bytes: int = _setting(64 * 1024, "larger request bodies get `body_too_large`")
    ledger_sync: str = _setting(
        "full",
        "`full`: every acknowledged change is on disk (survives power loss); `normal`: survives "
        "a daemon crash (kill -9) but not a power loss, and allocates faster on slow disks",
        choices=("full", "normal"),
    )
    ledger_backups: int = _setting(
        8,
        "how many backups of the ledger `state_dir/backups/` keeps, each checked before it "
        "counts (taken on a timer and at every clean stop); 0: none (docs/recovery.md)",
    )
    ledger_backup_interval_seconds: float = _setting(
        3 * 3600.0, "how often the ledger is backed up while the daemon runs (3 hours)"
    )
    shutdown_grace_seconds: float = _setting(
        5.0, "how long requests in flight may take after SIGTERM"
    )
    log_level: str = _setting(
        "INFO",
        "logging to stderr (the journal under systemd)",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
    )
    shared_gpus: tuple[str, ...] = _setting(
        (),
        "GPUs that memory shares may use, by index or UUID, or `all`; a list (comma-separated "
        "in the environment and on the command line); none by default",
    )
    share_memory_reserve_bytes: int = _setting(
        2**30, "memory of each shared GPU that no share may take (for contexts and drivers)"
    )
    share_enforcement: str = _setting(
        "off",
        "`warn`: record a share whose processes use more than its size; `kill`: warn, then "
        "kill its processes if it is still over at the next sample",
        choices=("off", "warn", "kill"),
    )
    process_tracking: str = _setting(
        "auto",
        "how the processes a bound lease's holder starts are followed: `scope`, a systemd "
        "scope (cgroup) per bound lease, the kernel's own membership (root, systemd as PID 1 "
        "on cgroup v2, its bus answering; refuses to start without them); `connector`, the "
        "kernel's process events (root with CAP_NET_ADMIN in the initial namespaces; refuses "
        "to start without them); `proc-scan`, /proc read once a second; `auto`, a scope "
        "wherever systemd offers one (the shipped unit), else the events where the kernel "
        "grants them, else the scan with a warning (docs/architecture.md, "
        '"How a process is tied to a lease")',
        choices=("auto", "connector", "scope", "proc-scan"),
    )
    metrics_listen: str | None = _setting(
        None,
        "serve Prometheus metrics at `/metrics` on this TCP address (`HOST:PORT`, `[IPv6]:PORT`); "
        "unset: no metrics port (docs/metrics.md)",
        example='"127.0.0.1:9423"',
    )
    metrics_textfile: str | None = _setting(
        None,
        "write the same metrics to this file on every sample interval, atomically, for "
        "node_exporter's textfile collector (a name ending in `.prom`); unset: no file",
        example='"/var/lib/prometheus/node-exporter/gpuallocd.prom"',
    )
    dashboard_listen: str | None = _setting(
        None,
        "serve the read-only web dashboard on this TCP address (`HOST:PORT`); a loopback "
        "address unless another is named (never `0.0.0.0`); unset: no dashboard "
        "(docs/dashboard.md)",
        example='"127.0.0.1:8423"',
    )
    cdi_spec_path: str | None = _setting(
        None,
        "write a CDI spec with one device per active lease here (kind `gpuallocd.io/lease`), "
        "rewritten on every grant and end, for `podman run --device gpuallocd.io/lease=ID` "
        "(docs/integrations.md); unset: none",
        example='"/var/run/cdi/gpuallocd.json"',
    )
    admin_groups: tuple[str, ...] = _setting(
        (),
        "groups whose members (and root) may revoke, drain and undrain; re-read on SIGHUP",
        example='["gpuadmin"]',
    )
    idle_reclaim_minutes: float | None = _setting(
        None,
        "report a lease whose GPUs showed no process and 0% utilisation this long, and revoke "
        "it `idle_grace_minutes` later while someone waits for its GPUs (unset: never)",
        example="60",
    )
    idle_grace_minutes: float = _setting(
        10.0, "how long an idle lease is kept after its holder was told, before reclaim"
    )
    history_retention_days: float = _setting(
        90.0, "ended leases and their history older than this are purged by housekeeping"
    )
    limits: LimitsTable = field(
        default_factory=LimitsTable,
        metadata={
            "section": "per-user limits: `[limits]` with `[limits.group.NAME]` and "
            "`[limits.user.NAME]` overrides, re-read on SIGHUP (docs/limits.md)"
        },
    )
    unleased_modes: UnleasedModes = field(
        default_factory=UnleasedModes,
        metadata={"within": "limits"},  # `unleased_use` in `[limits]`' group and user tables
    )
    queue_order: str = _setting(
        "fifo",
        "the wait queue's order: `fifo` (first come, first served) or `fair-share` (the "
        "account that used the fewest decayed GPU-hours first, growing with the wait: "
        "docs/scheduling.md)",
        choices=("fifo", "fair-share"),
    )
    fair_share_half_life_hours: float = _setting(
        168.0, "fair-share: a GPU-hour held this long ago counts half (a week)"
    )
    fair_share_wait_weight: float = _setting(
        1.0, "fair-share: the priority, in GPU-hours, a waiter gains per hour it waits"
    )
    fair_share_by: str = _setting(
        "user",
        "fair-share: whose use sets a waiter's priority, its owner's (`user`) or that of the "
        "owner's primary group (`group`)",
        choices=("user", "group"),
    )
    energy_interval_seconds: float = _setting(
        60.0,
        "how often the energy of leased GPUs (and of GPUs used without a lease) is charged as it "
        "runs, besides at each grant and end, from the counters each live sample reads (a driver "
        "reload or a restart loses at most this much); 0 turns energy accounting off "
        "(docs/accounting.md)",
        minimum=0.0,
    )
    energy_price_per_kwh: float | None = _setting(
        None,
        "a price per kWh: `usage` then shows what each user's energy cost",
        example="0.32",
        minimum=0.0,
    )
    energy_currency: str = _setting("", "the currency of `energy_price_per_kwh`, shown with costs")
    power_budget_watts: float | None = _setting(
        None,
        "the box's power budget for its GPUs (W; the power supply's safe continuous figure): "
        "each leased GPU counts its cap or default limit, each free one its idle draw; a "
        "grant that would pass it waits, or gets a lower cap (`power_fit`); re-read on SIGHUP",
        example="1600",
        minimum=1.0,
        unit="W",
    )
    power_fit: str = _setting(
        "wait",
        "a grant over `power_budget_watts`: `wait` in the queue, or `cap` its GPUs lower to fit "
        "(where the cards accept such a cap); re-read on SIGHUP",
        choices=("wait", "cap"),
    )
    lease_power_limit_watts: float | None = _setting(
        None,
        "a power cap (W) for the whole GPUs of every lease that asks for none, kept within each "
        "card's limits; set and put back as the lease begins and ends (docs/accounting.md)",
        example="250",
        minimum=1.0,
        unit="W",
    )
    fair_share_unleased: str = _setting(
        "ignore",
        "fair-share: `count` GPU time used without a lease (charged to its owner, "
        "docs/accounting.md) as the owner's GPU-hours, like a lease's, or `ignore` it",
        choices=("ignore", "count"),
    )
    preempt_min_runtime_seconds: float = _setting(
        1800.0,
        "a preemptible lease runs at least this long before anyone's request may preempt it; "
        "the longest a request may ask for (per group and user in `[limits]`; "
        "docs/preemption.md)",
    )
    preempt_lead_seconds: float = _setting(
        60.0,
        "a preempted lease's warning (`preempt_warning`) comes this long before the signal; "
        "the longest a request may ask for (per group and user in `[limits]`)",
    )
    preempt_grace_seconds: float = _setting(
        300.0,
        "from a preempted lease's signal to its deadline, when what is left of its processes "
        "is killed; the longest a request may ask for (per group and user in `[limits]`)",
    )
    revoke_grace_seconds: float = _setting(
        30.0,
        "after a revoke, how long the processes of a lease that asked to be terminated "
        '(`gpuallocctl run`, `on_revoke="terminate"`) have between SIGTERM and SIGKILL',
    )
    unleased_use: str = _setting(
        "report",
        "a process on a GPU (or MIG instance) whose user holds no lease on it: `report` it once "
        "(history, log, metric, `status`), `terminate` it after `unleased_grace_seconds`, or "
        "`adopt` it as its owner's lease where the GPU is free; per group and user in `[limits]` "
        "(docs/enforcement.md)",
        choices=MODES,
    )
    unleased_grace_seconds: float = _setting(
        60.0,
        "with `terminate`: how long an unleased process runs before SIGTERM (SIGKILL follows "
        "`revoke_grace_seconds` later)",
    )
    unleased_over_limit: str = _setting(
        "report",
        "with `adopt`: what happens to a process that cannot be adopted (its owner is over a "
        "limit, or someone else holds the GPU): `report`, or `terminate` after the grace",
        choices=("report", "terminate"),
    )
    unleased_exempt_users: tuple[str, ...] = _setting(
        (), "users whose processes may use GPUs without a lease (never reported)"
    )
    unleased_exempt_commands: tuple[str, ...] = _setting(
        DEFAULT_EXEMPT_COMMANDS,
        "programs that may use GPUs without a lease: display servers and GPU services, by the "
        "file name of the program the process runs, where only root can have put it "
        "(docs/enforcement.md)",
    )
    device_access: str = _setting(
        "off",
        "`acl`: a lease's holder gets read-write on its GPUs' device files (POSIX ACL) until "
        "it ends; with the driver's device files closed to users, only holders open them "
        "(docs/enforcement.md)",
        choices=("off", "acl"),
    )
    device_dir: str = _setting(
        "/dev", "where the GPUs' device files are (`nvidiaN`, `nvidia-caps/`, `dri/`)"
    )
    max_connections_per_user: int = _setting(
        64,
        "open connections one uid may hold at once (on the metrics and dashboard ports: one "
        "uid of this host, or one remote address); more are closed at once",
    )
    max_connections: int = _setting(
        4096,
        "open connections in all on the API socket (kept below the open-file limit, "
        "`LimitNOFILE=`); the metrics and dashboard ports have a budget of their own",
    )
    root_reserved_connections: int = _setting(
        16, "of `max_connections`, the slots only root may use"
    )
    request_head_timeout_seconds: float = _setting(
        10.0, "a new connection is closed if its first request's head has not arrived by then"
    )
    request_body_timeout_seconds: float = _setting(
        10.0, "a request whose body has not arrived by then gets `invalid_request`"
    )
    notify_retention_days: float = _setting(
        7.0,
        "notices (the per-user feed that `gpuallocctl notify-agent` delivers) older than this "
        "are purged; a notifier away longer is told it missed some (docs/notifications.md)",
    )
    notify_site_channels: tuple[str, ...] = _setting(
        (),
        "the site's own channels, delivered by the daemon off its event loop: `webhook URL` "
        "(a JSON POST, e.g. a lab chat's incoming webhook) or `ntfy URL/TOPIC`; a list "
        "(docs/notifications.md)",
        example='["webhook https://chat.example.org/hooks/gpus"]',
    )
    notify_site_secret_file: str | None = _setting(
        None,
        "a file holding the secret the site's webhooks are signed with (HMAC-SHA256 in "
        "`X-Gpuallocd-Signature`, as users' webhooks are), read at start: a regular file of "
        "root's (or the daemon's user's), mode 0600 or 0400, at least 16 characters; none: "
        "unsigned (docs/notifications.md)",
        example='"/etc/gpuallocd/site-webhook.secret"',
    )
    notify_site_events: tuple[str, ...] = _setting(
        ("gpu-unhealthy",),
        "which notices the site's channels get: `gpu-unhealthy` (any GPU), and of every "
        "user's: `granted`, `ending`, `revoked`, `ended`, `budget`, `unleased-use`",
    )

    @property
    def ledger_path(self) -> Path:
        return Path(self.state_dir) / "ledger.sqlite3"

    @property
    def lock_path(self) -> Path:
        return Path(self.state_dir) / "gpuallocd.lock"


@dataclass(frozen=True)
class Setting:
    """One row of the table, as every consumer reads it."""

    name: str
    type: type
    optional: bool
    default: Any
    meaning: str
    choices: tuple[str, ...]
    octal: bool
    example: str | None
    minimum: float | None = None
    unit: str | None = None

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    def show(self, value: Any) -> str:
        """A value as TOML writes it."""
        if value is None:
            return "unset"
        if self.octal:
            return oct(value)
        if isinstance(value, str):
            return f'"{value}"'
        if isinstance(value, tuple):
            return "[" + ", ".join(f'"{item}"' for item in value) + "]"
        return repr(value)


def _base_type(annotation: Any) -> tuple[type, bool]:
    """The setting's type and whether it may be unset; `tuple[str, ...]` is a list of strings."""
    if typing.get_origin(annotation) is tuple:
        return tuple, False
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if args:
        return args[0], True
    return annotation, False


def settings() -> tuple[Setting, ...]:
    """The table, in declaration order."""
    hints = typing.get_type_hints(DaemonConfig)
    rows = []
    for f in dataclasses.fields(DaemonConfig):
        if "section" in f.metadata or "within" in f.metadata:
            continue  # a table of its own (see sections()), or read from one
        base, optional = _base_type(hints[f.name])
        rows.append(
            Setting(
                name=f.name,
                type=base,
                optional=optional,
                default=f.default,
                meaning=f.metadata["meaning"],
                choices=f.metadata["choices"],
                octal=f.metadata["octal"],
                example=f.metadata["example"],
                minimum=f.metadata["minimum"],
                unit=f.metadata["unit"],
            )
        )
    return tuple(rows)


def sections() -> dict[str, str]:
    """The settings that are TOML tables of their own (file only), with their meaning."""
    return {
        f.name: f.metadata["section"]
        for f in dataclasses.fields(DaemonConfig)
        if "section" in f.metadata
    }


def render_toml() -> str:
    """The example config file: every key commented out, with its default and meaning. It
    sets nothing, so the defaults stay the code's: a later version's better default reaches
    a box installed with this file."""
    lines = [
        "# /etc/gpuallocd/gpuallocd.toml - every key is optional and commented out: the daemon",
        "# uses its own defaults (shown) for what is not set here. Uncomment what you change.",
        "# Generated from the settings table: gpuallocd --print-config toml",
    ]
    for s in settings():
        lines.append(f"\n# {s.meaning}".replace("`", ""))
        lines.append(f"# environment: {s.env}, option: {s.option}")
        value = s.show(s.default)
        lines.append(f"# {s.name} = {s.example if s.default is None else value}")
    for name, meaning in sections().items():
        lines.append(f"\n# {meaning}".replace("`", ""))
        lines.append(f"# [{name}]")
    return "\n".join(lines) + "\n"


def _allowed(s: Setting) -> str:
    """What the table says a value may be, besides its meaning."""
    if s.choices:
        return f" (one of {', '.join(f'`{c}`' for c in s.choices)})"
    said = [] if s.minimum is None else [f"at least {s.minimum:g}"]
    if s.unit is not None:
        said.append(f'`"{s.example}{s.unit}"` reads as {s.example}')
    return f" ({'; '.join(said)})" if said else ""


def render_markdown() -> str:
    """The settings table of docs/configuration.md."""
    rows = [
        "| key | default | environment | meaning |",
        "|---|---|---|---|",
    ]
    for s in settings():
        default = "unset" if s.default is None else f"`{s.show(s.default).strip(chr(34))}`"
        rows.append(f"| `{s.name}` | {default} | `{s.env}` | {s.meaning}{_allowed(s)} |")
    for name, meaning in sections().items():
        rows.append(f"| `[{name}]` | none | file only | {meaning} |")
    return "\n".join(rows) + "\n"
