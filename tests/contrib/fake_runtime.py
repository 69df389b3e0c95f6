"""A stand-in for `docker` / `podman`: the `run`, `wait` and `inspect` that gpuallocd-docker uses.

State lives in $FAKE_RUNTIME_DIR: `calls.jsonl` (every argv), and one folder per container
under `containers/`. A container runs until a test writes its exit status to `CID/exit`.
`run` with image `bad-image` fails as Docker does (status 125) without creating anything.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

STATE = Path(os.environ["FAKE_RUNTIME_DIR"])
CONTAINERS = STATE / "containers"
WITH_VALUE = {"--cidfile", "--label", "--env", "-e", "--gpus", "--device", "--name"}


def _exit_status(cid: str) -> int:
    exit_file = CONTAINERS / cid / "exit"
    while not exit_file.exists():
        time.sleep(0.05)
    return int(exit_file.read_text() or "0")


def run(args: list[str]) -> int:
    options: dict[str, str] = {}
    detach, i = False, 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in WITH_VALUE:
            options[args[i]] = args[i + 1]
            i += 2
            continue
        detach = detach or args[i] in ("-d", "--detach")
        i += 1
    if args[i] == "bad-image":
        print("Unable to find image 'bad-image:latest' locally", file=sys.stderr)
        return 125
    cid = uuid.uuid4().hex
    (CONTAINERS / cid).mkdir(parents=True)
    if "--cidfile" in options:
        Path(options["--cidfile"]).write_text(cid)
    if detach:
        print(cid)
        return 0
    return _exit_status(cid)


def wait(cid: str) -> int:
    if not (CONTAINERS / cid).is_dir():
        print(f"Error response from daemon: No such container: {cid}", file=sys.stderr)
        return 1
    print(_exit_status(cid))
    return 0


def inspect(cid: str) -> int:
    if not (CONTAINERS / cid).is_dir():
        return 1
    print("false" if (CONTAINERS / cid / "exit").exists() else "true")
    return 0


def main() -> int:
    args = sys.argv[1:]
    with open(STATE / "calls.jsonl", "a") as calls:
        calls.write(json.dumps(args) + "\n")
    if args[0] == "run":
        return run(args[1:])
    if args[0] == "wait":
        return wait(args[1])
    if args[0] == "inspect":
        return inspect(args[-1])
    print(f"fake runtime: unsupported command {args[0]}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
