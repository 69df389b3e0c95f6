"""Root's overrides: `gpuallocctl release GPU` gives a draining GPU back to the pool."""

from __future__ import annotations

from urllib.parse import quote

import click

from gpuallocd.cli.common import daemon_client
from gpuallocd.cli.output import echo_json, escape_unprintable

__all__ = ["COMMANDS"]


@click.command()
@click.argument("gpu")
@click.pass_context
def release(ctx: click.Context, gpu: str) -> None:
    """Let a draining GPU be granted again, although processes still run on it (root only).

    After a lease ends, a GPU on which processes of its former holder still run is
    `draining` and is not granted until they are gone. GPU is a UUID or an index.
    """
    with daemon_client(ctx) as client:
        status = client.request("POST", f"/v1/gpus/{quote(gpu, safe='')}/release")
    if ctx.obj.json:
        echo_json(status)
        return
    uuid = escape_unprintable(status["uuid"])
    click.echo(f"GPU {status['index']} ({uuid}) is {status['state']} now")


COMMANDS = (release,)
