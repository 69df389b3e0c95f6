"""Real users, real notifiers: alice queues a job and leaves; her desktop, her webhook and
her mail hear of the grant and of the lease's end ahead, each once across a daemon restart
and a restart of her notifier; bob hears nothing of hers and can read or set nothing of hers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuallocd.notify.state import NotifyState
from tests.harness import DaemonPaths, HandClock, ThreadDaemon, wait_for
from tests.notify_desktop import Desktop, start_desktop
from tests.notify_sinks import MailSink, WebhookSink, sendmail_or_skip, write_msmtprc
from tests.system_users import SystemUsers, open_to_everyone

START = 1_800_000_000.0
MINUTE = 60.0


@dataclass
class Person:
    short: str
    home: Path
    env: dict[str, str]
    desktop: Desktop
    hook: WebhookSink
    agent: subprocess.Popen[str] | None = None


class Node:
    """A daemon on hand clocks (restartable), and its people."""

    def __init__(self, paths: DaemonPaths, users: SystemUsers) -> None:
        self.paths, self.users = paths, users
        self.wall, self.boot = HandClock(START), HandClock(9000.0)
        self.daemon = self._start()
        self.people: dict[str, Person] = {}

    def _start(self) -> ThreadDaemon:
        return ThreadDaemon(
            self.paths, default_policy="simple", clock=self.wall, monotonic=self.boot
        ).start()

    def restart(self) -> None:
        self.daemon.stop()
        self.daemon = self._start()

    def step(self, seconds: float) -> None:
        self.wall.step(seconds)
        self.boot.step(seconds)

    def ctl(self, short: str, *args: str) -> subprocess.CompletedProcess[str]:
        argv = ["-m", "gpuallocd.cli", "--socket", str(self.paths.socket), *args]
        return self.users.run(short, argv, env=self.people[short].env)

    def person(self, short: str, mail_port: int) -> Person:
        uid, gid = self.users.uid(short), _gid(self.users, short)
        home = self.paths.root / short
        home.mkdir(mode=0o700)
        os.chown(home, uid, gid)
        env = {
            "HOME": str(home),
            "XDG_CONFIG_HOME": f"{home}/.config",
            "XDG_STATE_HOME": f"{home}/.state",
        }
        write_msmtprc(home, mail_port, uid, gid)
        bus_env = {**os.environ, **self.users.env, **env}
        desktop = start_desktop(home, self.users.python, bus_env, user=uid, group=gid)
        env["DBUS_SESSION_BUS_ADDRESS"] = desktop.address
        person = Person(short, home, env, desktop, WebhookSink().start())
        self.people[short] = person
        return person

    def start_agent(self, person: Person) -> None:
        argv = ["-m", "gpuallocd.cli", "--socket", str(self.paths.socket), "notify-agent"]
        log = person.home / "agent.log"
        person.agent = self.users.start(person.short, [*argv, "--poll", "5"], log, person.env)

    def stop_agent(self, person: Person) -> None:
        if person.agent is not None and person.agent.poll() is None:
            person.agent.send_signal(signal.SIGKILL)
            person.agent.wait(10)

    def close(self) -> None:
        for person in self.people.values():
            self.stop_agent(person)
            person.desktop.stop()
            person.hook.stop()
        self.daemon.stop()


def _gid(users: SystemUsers, short: str) -> int:
    import pwd

    return pwd.getpwnam(users.name(short)).pw_gid


@pytest.fixture
def node(system_users: SystemUsers, short_dir: Path, paths: DaemonPaths) -> Iterator[Node]:
    open_to_everyone(short_dir)
    found = Node(paths, system_users)
    yield found
    found.close()


@pytest.fixture
def mail() -> Iterator[MailSink]:
    pytest.importorskip("aiosmtpd", reason="the test extra's aiosmtpd is not installed")
    sendmail_or_skip()
    sink = MailSink().start()
    yield sink
    sink.stop()


def _add_channels(node: Node, person: Person, address: str) -> None:
    for args in (("desktop",), ("mail", address)):
        done = node.ctl(person.short, "notify", "add", *args)
        assert done.returncode == 0, done.stderr
    done = node.ctl(person.short, "--json", "notify", "add", "webhook", person.hook.url)
    assert done.returncode == 0, done.stderr
    person.hook.secret = json.loads(done.stdout)["secret"]


def _queue_and_leave(node: Node, short: str) -> None:
    """The job is queued by a process of its own session; the command that started it (the
    terminal's) has returned."""
    argv = ["-m", "gpuallocd.cli", "--socket", str(node.paths.socket), "allocate", "-n", "1"]
    argv += ["--wait", "--ttl", "1h", "--label", "overnight"]
    script = (
        "import subprocess, sys; subprocess.Popen([sys.executable, *sys.argv[1:]], "
        "start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
        "stderr=subprocess.DEVNULL)"
    )
    done = node.users.run(short, ["-c", script, *argv], env=node.people[short].env)
    assert done.returncode == 0, done.stderr


def _told(person: Person, mail: MailSink, address: str) -> dict[str, list[str]]:
    return {
        "desktop": [n["summary"] for n in person.desktop.notifications()],
        "webhook": [d.json["title"] for d in person.hook.deliveries],
        "mail": [str(m["Subject"]) for m in mail.messages if m["To"] == address],
    }


def _caught_up(person: Person) -> None:
    """Wait until the person's notifier saved its cursor past every notice it delivered (it
    delivers to each channel, then saves: a kill in between delivers the notice again)."""
    path = person.home / ".state" / "gpuallocd" / "notify-state.json"
    last = max(int(d.json["id"]) for d in person.hook.deliveries)

    def saved() -> bool:
        cursors = NotifyState.load(path).cursors if path.exists() else {}
        return max(cursors.values(), default=0) >= last

    wait_for(saved, 30, what="the notifier's cursor saved")


def _all_told(person: Person, mail: MailSink, address: str, count: int) -> dict[str, list[str]]:
    wait_for(
        lambda: all(len(v) >= count for v in _told(person, mail, address).values()),
        60,
        what=f"{count} notice(s) on each of {person.short}'s channels",
    )
    return _told(person, mail, address)


def test_a_queued_job_is_told_on_every_channel_once_across_restarts_and_to_its_owner_only(
    node: Node, mail: MailSink
) -> None:
    """alice queues a job and closes her terminal: her desktop, webhook (signature good) and
    mail hear of the grant and of the end 15 minutes and 1 minute ahead, each exactly once,
    though the daemon restarts and her notifier is killed in between; bob hears nothing."""
    alice, bob = node.person("alice", mail.port), node.person("bob", mail.port)
    alice_at, bob_at = "alice@example.org", "bob@example.org"
    _add_channels(node, alice, alice_at)
    _add_channels(node, bob, bob_at)
    node.start_agent(alice)
    node.start_agent(bob)
    with node.daemon.client() as root:
        blocker = root.allocate(4, ttl=7200)
        _queue_and_leave(node, "alice")
        wait_for(lambda: len(root.queue()) == 1, 30, what="alice's request waits")
        node.step(2 * MINUTE)
        root.free(blocker.id)
    told = _all_told(alice, mail, alice_at, 1)
    (lease_id,) = {d.json["lease_id"] for d in alice.hook.deliveries}
    assert all(f"lease {lease_id} (overnight)" in t[0] for t in told.values()), told
    node.step(45 * MINUTE + 1)
    told = _all_told(alice, mail, alice_at, 2)
    assert all("expires in 15m" in t[1] for t in told.values()), told
    _caught_up(alice)  # killed after its cursor is saved: nothing to deliver again
    node.stop_agent(alice)
    node.restart()
    node.step(MINUTE)
    node.step(13 * MINUTE)
    with node.daemon.client() as root:
        wait_for(
            lambda: len(root.notifications(everyone=True)["notices"]) >= 3, 30, what="1m warning"
        )
    node.start_agent(alice)
    told = _all_told(alice, mail, alice_at, 3)
    assert all("expires in 1m" in t[2] for t in told.values()), told
    node.step(10)
    with node.daemon.client() as root:
        root.notifications(after=3, wait=2)
    assert {k: len(v) for k, v in _told(alice, mail, alice_at).items()} == {
        "desktop": 3,
        "webhook": 3,
        "mail": 3,
    }
    assert all(d.signed for d in alice.hook.deliveries)
    assert _told(bob, mail, bob_at) == {"desktop": [], "webhook": [], "mail": []}


def test_bob_can_read_set_or_report_nothing_of_alices(node: Node, mail: MailSink) -> None:
    """bob's feed holds none of alice's notices and `--all` is root's; bob cannot write a
    channel into alice's file; a report names no one but its sender."""
    alice, bob = node.person("alice", mail.port), node.person("bob", mail.port)
    done = node.ctl("alice", "allocate", "-n", "1", "--ttl", "30s")
    assert done.returncode == 0, done.stderr
    node.step(31)
    with node.daemon.client() as root:
        wait_for(lambda: root.notifications(everyone=True)["notices"] != [], 20, what="a notice")
    feed = node.ctl("bob", "--json", "notify", "feed")
    assert feed.returncode == 0 and json.loads(feed.stdout)["notices"] == []
    everyone = node.ctl("bob", "notify", "feed", "--all")
    assert everyone.returncode == 5 and "only root" in everyone.stderr
    alices = node.ctl("alice", "--json", "notify", "feed")
    assert [n["kind"] for n in json.loads(alices.stdout)["notices"]] == ["ended"]
    node.people["bob"].env["XDG_CONFIG_HOME"] = alice.env["XDG_CONFIG_HOME"]
    node.ctl("alice", "notify", "add", "desktop")
    before = (alice.home / ".config" / "gpuallocd" / "notify.toml").read_text()
    planted = node.ctl("bob", "notify", "add", "webhook", bob.hook.url)
    assert planted.returncode != 0
    assert (alice.home / ".config" / "gpuallocd" / "notify.toml").read_text() == before
    script = (
        "import sys; from gpulease import Client, InvalidRequest\n"
        "c = Client(sys.argv[1])\n"
        "try:\n"
        "    c.request('POST', '/v1/notifications/deliveries', "
        "{'channel': 'x', 'kind': 'desktop', 'ok': True, 'uid': int(sys.argv[2])})\n"
        "except InvalidRequest as exc:\n"
        "    print(exc.code)\n"
    )
    alice_uid = str(node.users.uid("alice"))
    refused = node.users.run("bob", ["-c", script, str(node.paths.socket), alice_uid])
    assert refused.stdout.strip() == "invalid_request"
