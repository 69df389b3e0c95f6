"""About the command line and the daemon's choices: `completion` and `policies`."""

from __future__ import annotations

import click

from gpuallocd.cli.output import echo_json
from gpuallocd.cli.style import render_table

__all__ = ["COMMANDS", "policy_summary"]

PROG_NAME = "gpuallocctl"
COMPLETE_VAR = "_GPUALLOCCTL_COMPLETE"


@click.command(short_help="Print the shell completion script of SHELL")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the completion script of SHELL: commands, options, choices.

    bash: eval "$(gpuallocctl completion bash)" in ~/.bashrc; zsh: the same in ~/.zshrc;
    fish: gpuallocctl completion fish > ~/.config/fish/completions/gpuallocctl.fish
    """
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    if completer is None:  # click knows all three; guard against a trimmed click
        raise click.UsageError(f"no completion for {shell}")
    root = ctx.find_root().command
    click.echo(completer(root, {}, PROG_NAME, COMPLETE_VAR).source())


def policy_summary(name: str) -> str | None:
    """The first line of an installed policy's docstring; None where it is not installed here."""
    from gpuallocd.errors import UnknownPolicy
    from gpuallocd.policies.registry import policy_factory

    try:
        doc = policy_factory(name).__doc__ or ""
    except UnknownPolicy:
        return None
    return doc.strip().splitlines()[0].rstrip(".") if doc.strip() else None


@click.command(short_help="The allocation policies the daemon knows")
@click.option("--local", is_flag=True, help="The policies installed here, without a daemon.")
@click.pass_context
def policies(ctx: click.Context, local: bool) -> None:
    """The allocation policies the daemon knows (for --policy), each with what it does."""
    if local:
        from gpuallocd.policies import available_policies

        names = available_policies()
    else:
        from gpuallocd.cli.common import daemon_client

        with daemon_client(ctx) as client:
            names = client.policies()
    if ctx.obj.json:
        echo_json({"policies": names})
        return
    click.echo(render_table(("POLICY", "WHAT IT DOES"), [(n, policy_summary(n)) for n in names]))


COMMANDS = (completion, policies)
