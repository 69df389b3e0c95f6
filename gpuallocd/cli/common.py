"""What every daemon-facing command shares: the client, error handling, time display."""

from __future__ import annotations

import contextlib
import functools
import pwd
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gpuallocd.cli.quantities import ByteSize, Duration, Watts, format_left
from gpuallocd.cli.text import escape_unprintable

if TYPE_CHECKING:
    from gpulease import Client

__all__ = [
    "MIN_TTL_SECONDS",
    "TTL",
    "PreemptSignal",
    "check_visible",
    "daemon_client",
    "format_expiry",
    "lease_request_options",
    "preemption_arguments",
    "preemption_options",
    "preemption_text",
    "user_known",
    "user_of",
]

F = TypeVar("F", bound=Callable[..., Any])
MIN_TTL_SECONDS = 10.0
TTL = Duration(MIN_TTL_SECONDS, why_minimum="a lease this short expires before it is used")


@functools.lru_cache(maxsize=256)
def user_of(uid: int | None) -> str:
    """The user name of a uid on this node; the uid itself where it has none, `?` if unknown."""
    if uid is None:
        return "?"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def user_known(name: str) -> bool:
    """Whether this node's user database has a user named `name` (the CLI's own lookups,
    once per process: the daemon's go through host/users.py)."""
    try:
        pwd.getpwnam(name)
    except (KeyError, ValueError):  # ValueError: a NUL byte in the name
        return False
    return True


def lease_request_options(ttl_help: str, label_help: str) -> Callable[[F], F]:
    """The options of a lease request, shared by `allocate` and `run`."""
    options = (
        click.option("-n", "--count", type=click.IntRange(min=1), help="How many GPUs."),
        click.option(
            "--gpu",
            "gpus",
            multiple=True,
            help="A GPU to lease, by index or UUID, or a MIG instance by its MIG- UUID "
            "(repeatable).",
        ),
        click.option(
            "--memory",
            type=ByteSize(),
            metavar="SIZE",
            help="A share of this much memory (20G, 512M) on each of -n shared GPUs.",
        ),
        click.option("--mig", help="MIG instances of this profile (1g.10gb), -n of them."),
        click.option("--policy", help="Allocation policy (default: the daemon's)."),
        click.option("--ttl", type=TTL, help=ttl_help),
        click.option("--label", help=label_help),
        click.option(
            "--min-free-memory",
            type=ByteSize(),
            help="Only GPUs with at least this much memory free: 20G, 512M (GiB, MiB).",
        ),
        click.option(
            "--power-limit",
            type=Watts(),
            metavar="WATTS",
            help="Cap each leased GPU's power while the lease lasts: 250W.",
        ),
        click.option("--wait", is_flag=True, help="Queue until the GPUs are free."),
        click.option(
            "--timeout",
            type=Duration(),
            help="Wait at most this long: 90s, 30m, 2h (default: as long as it takes).",
        ),
    )

    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


class PreemptSignal(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.4
    """`--signal SIG[@SECONDS]` as Slurm's: the signal a preempted lease's processes get
    (`TERM`, `SIGUSR1`), and with `@SECONDS` the grace from it to the kill."""

    name = "signal"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        text, _, seconds = str(value).strip().upper().partition("@")
        name = text if text.startswith("SIG") else f"SIG{text}"
        grace: float | None = None
        if seconds:
            try:
                grace = float(seconds)
            except ValueError:
                self.fail(f"{value!r}: after @ give the grace in seconds (USR1@120)", param, ctx)
            if not grace >= 0:
                self.fail(f"{value!r}: the grace must be 0 s or more", param, ctx)
        return (name, grace)


def preemption_options(*, requeue: bool) -> Callable[[F], F]:
    """The options of a preemptible request (`allocate`, `run`; `--requeue` for `run`)."""
    options = [
        click.option(
            "--preemptible",
            is_flag=True,
            help="Let the lease be preempted for others: warned, signalled, then ended at "
            "its checkpoint or deadline (docs/preemption.md).",
        ),
        click.option(
            "--min-runtime",
            type=Duration(),
            help="Not preempted before it ran this long (at most the site's; default: that).",
        ),
        click.option(
            "--lead",
            type=Duration(),
            help="The warning comes this long before the signal (at most the site's).",
        ),
        click.option(
            "--grace",
            type=Duration(),
            help="From the signal to the kill (at most the site's).",
        ),
        click.option(
            "--signal",
            "preempt_signal",
            type=PreemptSignal(),
            metavar="SIG[@SECONDS]",
            help="The signal to its processes (default TERM); @SECONDS sets the grace, as "
            "Slurm's --signal.",
        ),
    ]
    if requeue:
        options.append(
            click.option(
                "--requeue",
                is_flag=True,
                help="Preemptible; when preempted, start the command again when GPUs fit, at "
                "its old place in the queue, with GPUALLOCD_CHECKPOINT set to its last "
                "checkpoint.",
            )
        )

    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def preemption_arguments(options: dict[str, Any], *, requeue: bool = False) -> dict[str, Any]:
    """The preemption options (popped from `options`) under the client's names; a term
    without --preemptible (or --requeue) is a usage error, not a silent no-op."""
    signal = options.pop("preempt_signal", None)
    found = {
        "preemptible": bool(options.pop("preemptible", False) or requeue),
        "min_runtime": options.pop("min_runtime", None),
        "preempt_lead": options.pop("lead", None),
        "preempt_grace": options.pop("grace", None),
        "preempt_signal": None if signal is None else signal[0],
    }
    if signal is not None and signal[1] is not None:
        if found["preempt_grace"] is not None:
            raise click.UsageError("give the grace once: --grace or --signal SIG@SECONDS")
        found["preempt_grace"] = signal[1]
    terms = ("min_runtime", "preempt_lead", "preempt_grace", "preempt_signal")
    if not found["preemptible"] and any(found[name] is not None for name in terms):
        raise click.UsageError("--min-runtime, --lead, --grace and --signal need --preemptible")
    return found


def preemption_text(preemption: dict[str, Any] | None, now: float) -> str:
    """`preemptible`, or under way: `preempted for bob: ends by 14:07 (in 4m10s)`."""
    if not preemption:
        return "preemptible"
    deadline = float(preemption["deadline_at"])
    when = time.strftime("%H:%M", time.localtime(deadline))
    left = format_left(deadline, now)
    who = escape_unprintable(str(preemption.get("for") or "?"))
    return f"preempted for {who}: ends by {when}" + (f" (in {left})" if left else "")


def check_visible(mig: str | None, visible: str) -> None:
    """Refuse `--visible index` with `--mig` before anything is leased: a MIG instance has
    no index, CUDA names it by its MIG- UUID only."""
    if mig is not None and visible == "index":
        raise click.UsageError(
            "--visible index cannot name MIG instances (they have no index, CUDA takes "
            "their MIG- UUIDs): leave --visible at uuid"
        )


@contextlib.contextmanager
def daemon_client(ctx: click.Context) -> Iterator[Client]:
    """A client on the group's socket (its errors become CLI errors in `cli.errors`)."""
    from gpulease import Client

    with Client(ctx.obj.socket) as client:
        yield client


def format_expiry(expires_at: float | None, now: float | None = None) -> str | None:
    """`in 59m12s` style (the tables' durations); None where there is nothing to show."""
    if expires_at is None:
        return None
    left = format_left(expires_at, time.time() if now is None else now)
    return left if left == "due" else f"in {left}"
