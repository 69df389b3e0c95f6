"""Cases 7 and 8: no label reaches a terminal raw; no body or query gets a 500."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpulease import InvalidRequest

from gpuallocd.cli import cli
from gpuallocd.ledger import Ledger
from gpuallocd.model import Lease, LeasedGpu
from gpuallocd.topology import load_topology
from tests.harness import DaemonPaths, ThreadDaemon
from tests.rawhttp import exchange

FORGED = "ok\x1b[2J\x1b[H\rroot  4  forged\x07\u202e"


@pytest.mark.parametrize("label", ["\x1b[2Jclear", "bell\x07", "over\rwrite", "rtl\u202eevil"])
def test_labels_with_control_characters_are_refused(daemon: ThreadDaemon, label: str) -> None:
    """A label with ESC, BEL, CR or a bidi override is `invalid_request`, naming the field."""
    with daemon.client() as client, pytest.raises(InvalidRequest) as refused:
        client.allocate(1, label=label)
    assert refused.value.details == {"field": "label"}
    assert "control characters" in refused.value.message


def test_revoke_reasons_with_control_characters_are_refused(daemon: ThreadDaemon) -> None:
    """A revoke reason is checked the same way; the lease stays active."""
    with daemon.client() as client:
        lease = client.allocate(1, label="plain, with emoji \u2764\ufe0f and a zwj \u200d")
        with pytest.raises(InvalidRequest):
            client.revoke(lease.id, reason="done\x1b]0;pwned\x07")
        assert client.lease(lease.id).state == "active"


def test_leases_table_escapes_what_an_older_ledger_holds(
    paths: DaemonPaths, start_daemon: Callable[..., ThreadDaemon]
) -> None:
    """A label with control characters already in the ledger prints escaped, on one row."""
    paths.state_dir.mkdir(mode=0o700)
    ledger = Ledger(paths.state_dir / "ledger.sqlite3")
    gpu = load_topology("example:workstation-4gpu-nvbridge").gpus[0]
    ledger.sync_gpus((gpu,), 0.0)
    forged = Lease(
        id="aaaaaaaaaaaa",
        gpus=(LeasedGpu(gpu.uuid, gpu.index),),
        owner_uid=0,
        owner_name="root",
        pid=None,
        label=FORGED,
        policy="simple",
        created_at=4e9,
        expires_at=4e9 + 3600,
    )
    ledger.grant(forged, 0)
    ledger.close()
    daemon = start_daemon(default_policy="simple", clock=lambda: 4e9 + 1)
    wide = {"COLUMNS": "200"}  # the whole label: the table fits the terminal's width
    result = CliRunner().invoke(cli, ["--socket", str(daemon.paths.socket), "leases"], env=wide)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\r" not in result.output and "\x07" not in result.output
    assert "\\x1b[2J" in result.output and "\\u202e" in result.output
    assert len(result.output.strip().splitlines()) == 2  # the header and one row


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"[" * 5000 + b"]" * 5000, "nested"),
        (b'{"count": ' + b"7" * 5000 + b"}", "digits"),
        (b'{"count": 1, "label": "\xff\xfe"}', "utf-8"),
        (b'{"count": 1', "truncated"),
    ],
)
def test_every_json_decoding_failure_is_malformed_json(
    daemon: ThreadDaemon, body: bytes, why: str
) -> None:
    """Deep nesting, a 5,000-digit integer, bad UTF-8, bad syntax: 400 malformed_json."""
    status, answer = exchange(daemon.paths.socket, "POST", "/v1/leases", body)
    assert (status, answer["error"]["code"]) == (400, "malformed_json"), why


def test_nesting_past_the_limit_is_malformed_json_on_every_python(daemon: ThreadDaemon) -> None:
    """101 levels of arrays are malformed_json whatever depth this Python's parser takes;
    100 levels decode (and the label is refused as not a string)."""
    deep = b"[" * 100 + b"]" * 100
    at_limit = b'{"count": 1, "label": ' + deep[1:-1] + b"}"  # 100 levels with the object
    past = b'{"count": 1, "label": ' + deep + b"}"
    status, answer = exchange(daemon.paths.socket, "POST", "/v1/leases", past)
    assert (status, answer["error"]["code"]) == (400, "malformed_json")
    assert "more than 100 levels" in answer["error"]["message"]
    status, answer = exchange(daemon.paths.socket, "POST", "/v1/leases", at_limit)
    assert (status, answer["error"]["code"]) == (400, "invalid_request")


@pytest.mark.parametrize("limit", ["%C2%B2", "%D9%A1%D9%A0", "1e3", "-1", "+5", "%EF%BC%95"])
def test_history_limit_takes_ascii_digits_only(daemon: ThreadDaemon, limit: str) -> None:
    """`history?limit=²` (or Arabic-Indic, fullwidth, signed, exponent): 400 invalid_request."""
    status, answer = exchange(daemon.paths.socket, "GET", f"/v1/history?limit={limit}")
    assert (status, answer["error"]["code"]) == (400, "invalid_request")
    assert answer["error"]["details"] == {"field": "limit"}


def test_a_huge_count_is_a_clear_error(daemon: ThreadDaemon) -> None:
    """An integer of 4,000 digits is parsed and refused as more GPUs than the node has."""
    body = json.dumps({"count": int("9" * 4000)}).encode()
    status, answer = exchange(daemon.paths.socket, "POST", "/v1/leases", body)
    assert (status, answer["error"]["code"]) == (400, "count_exceeds_node")
    assert Path(daemon.paths.socket).exists()
