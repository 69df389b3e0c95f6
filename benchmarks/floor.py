"""The machine's floor for one allocate+free pair: what no daemon can go below.

A pair is two requests, each one Unix-socket round trip and (in `full` mode) one durable
SQLite commit. This measures both on this machine, now: a round trip of a small message to
another process over AF_UNIX, and a one-row WAL commit with `synchronous=FULL` in a scratch
database on the disk of the given directory. The standard library alone.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["Floor", "measure_floor"]

_MESSAGE = b"x" * 200  # about the size of an allocate request
_WARMUP = 50


@dataclass(frozen=True)
class Floor:
    round_trip_us: float
    commit_us: float
    directory: str

    @property
    def pair_ms(self) -> float:
        """Two round trips and two durable commits."""
        return 2 * (self.round_trip_us + self.commit_us) / 1000.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "pair_ms": round(self.pair_ms, 4)}


def _echo_forever(sock: socket.socket) -> None:
    while True:
        data = sock.recv(4096)
        if not data:
            return
        sock.sendall(data)


def socket_round_trip_us(rounds: int) -> float:
    """p50 of a round trip to a forked echo process over an AF_UNIX stream socket."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # the echo process
        ours.close()
        try:
            _echo_forever(theirs)
        finally:
            os._exit(0)
    theirs.close()
    times: list[float] = []
    try:
        for i in range(rounds + _WARMUP):
            started = time.perf_counter()
            ours.sendall(_MESSAGE)
            received = 0
            while received < len(_MESSAGE):
                received += len(ours.recv(4096))
            if i >= _WARMUP:
                times.append(time.perf_counter() - started)
    finally:
        ours.close()
        os.waitpid(pid, 0)
    return statistics.median(times) * 1e6


def durable_commit_us(directory: Path, rounds: int) -> float:
    """p50 of a one-row `BEGIN IMMEDIATE ... COMMIT` in WAL mode with `synchronous=FULL`."""
    with tempfile.TemporaryDirectory(prefix=".floor-", dir=directory) as scratch:
        conn = sqlite3.connect(Path(scratch) / "floor.sqlite3", isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
            times: list[float] = []
            for i in range(rounds + _WARMUP):
                started = time.perf_counter()
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO t (v) VALUES (?)", ("lease",))
                conn.execute("COMMIT")
                if i >= _WARMUP:
                    times.append(time.perf_counter() - started)
        finally:
            conn.close()
    return statistics.median(times) * 1e6


def measure_floor(directory: Path, rounds: int = 2000) -> Floor:
    """The floor on this machine now, with the commits on the disk of `directory`."""
    return Floor(
        round_trip_us=socket_round_trip_us(rounds),
        commit_us=durable_commit_us(directory, max(rounds // 4, 100)),
        directory=str(directory),
    )
