"""The MCP tools without a daemon: arguments checked against their schemas before anything is
sent, and the SDK imported by `gpuallocctl mcp` alone."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from gpuallocd.errors import InvalidRequest
from gpuallocd.mcp.arguments import check_arguments
from gpuallocd.mcp.catalog import TOOLS, tool_named, with_policies
from gpuallocd.mcp.outputs import OTHERS_TEXT
from tests.system_users import SystemUsers


def schema(name: str) -> dict[str, Any]:
    spec = tool_named(name)
    assert spec is not None
    return spec.input_schema


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("allocate", {"count": True}, "count"),  # a boolean is not a number
        ("allocate", {"count": 0}, "count"),
        ("allocate", {"count": 1.5}, "count"),
        ("allocate", {"ttl_seconds": float("nan")}, "ttl_seconds"),
        ("allocate", {"ttl_seconds": float("inf")}, "ttl_seconds"),
        ("allocate", {"ttl_seconds": 0}, "ttl_seconds"),
        ("allocate", {"gpus": []}, "gpus"),
        ("allocate", {"gpus": [0, None]}, "gpus"),
        ("allocate", {"label": "x" * 201}, "label"),
        ("export_env", {"lease_id": "a", "visible": "pci"}, "visible"),
        ("free", {}, "lease_id"),
        ("free", {"lease_id": ""}, "lease_id"),
        ("allocate", {"power_limit_watts": 0}, "power_limit_watts"),
        ("allocate", {"power_limit_watts": 1_000_000}, "power_limit_watts"),
        ("allocate", {"power_limit_watts": 250.5}, "power_limit_watts"),
        ("gpus", {"others_text": "yes"}, "others_text"),
    ],
)
def test_an_ill_formed_argument_is_refused_naming_its_field(
    tool: str, arguments: dict[str, Any], field: str
) -> None:
    """Wrong type, range, length or choice, or a missing argument: invalid_request."""
    with pytest.raises(InvalidRequest) as refused:
        check_arguments(schema(tool), arguments)
    assert refused.value.details["field"] == field


def test_unknown_arguments_are_refused_and_good_ones_pass() -> None:
    """A typo never passes silently; a well-formed call comes back as given."""
    with pytest.raises(InvalidRequest) as refused:
        check_arguments(schema("allocate"), {"count": 1, "ttl": 60})
    assert refused.value.details["fields"] == ["ttl"]
    given = {"count": 2, "gpus": [0, "GPU-1"], "memory": "20G", "wait": True, "keep": False}
    assert check_arguments(schema("allocate"), given) == given
    assert check_arguments(schema("gpus"), None) == {}


def test_every_tool_schema_is_an_object_that_names_its_required_arguments() -> None:
    """Required arguments are properties; every property has a type."""
    for spec in TOOLS:
        properties = spec.input_schema["properties"]
        assert set(spec.required) <= set(properties)
        assert all("type" in rule for rule in properties.values()), spec.name


def test_the_sdk_is_imported_by_the_mcp_command_alone() -> None:
    """The daemon, the client package and the rest of the CLI never import the MCP SDK."""
    probe = (
        "import sys, gpulease, gpuallocd.daemon, gpuallocd.cli.app, gpuallocd.mcp\n"
        "assert not [m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')]"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


WITHOUT_SDK = (
    "import sys; sys.modules['mcp'] = None\n"
    "from gpuallocd.cli import main; sys.argv = ['gpuallocctl', 'mcp']; main()"
)


def _named_command(stderr: str) -> str:
    """The command the error names: after `install it with: `, up to the SDK's spec."""
    assert "Traceback" not in stderr and "gpuallocd[mcp]" not in stderr, stderr
    found = re.search(r"install it with: (.+ install 'mcp>=2')", stderr)
    assert found is not None, stderr
    return found.group(1)


def test_without_the_sdk_the_command_names_the_one_command_that_installs_it() -> None:
    """`gpuallocctl mcp` where the SDK is missing: one line naming the pip of gpuallocctl's
    own environment (no index serves `gpuallocd[mcp]`), exit 1; that command, run as said,
    installs the SDK there (here, in the checkout's environment: already satisfied)."""
    done = subprocess.run([sys.executable, "-c", WITHOUT_SDK], capture_output=True, text=True)
    assert done.returncode == 1
    command = _named_command(done.stderr)
    assert command == f"{Path(sys.executable).parent / 'pip'} install 'mcp>=2'"
    installed = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    assert "Requirement already satisfied: mcp>=2" in installed.stdout


def test_a_user_who_cannot_write_the_environment_is_told_to_use_sudo(
    system_users: SystemUsers,
) -> None:
    """On the README's install the environment is root's (/opt/gpuallocd): a user is told
    the same pip with sudo, not a pip that would install somewhere else."""
    done = system_users.run("alice", ["-c", WITHOUT_SDK])
    assert done.returncode == 1
    command = _named_command(done.stderr)
    assert command.startswith("sudo ") and command.endswith(" install 'mcp>=2'")


def test_every_tool_declares_the_shape_of_its_answer() -> None:
    """An output schema per tool, an object (what MCP asks of one), valid JSON Schema."""
    for spec in TOOLS:
        schema = spec.output_schema
        assert schema["type"] == "object", spec.name
        Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize(
    "value",
    [
        "my own label",
        None,
        {"by": "bob", "withheld": True},
        {"by": "bob", "untrusted": True, "quoted": '"x"', "cut": False},
    ],
)
def test_others_words_have_one_shape_in_every_answer(value: Any) -> None:
    """A label or reason is the caller's string, nothing, or a marked object."""
    Draft202012Validator(OTHERS_TEXT).validate(value)


def test_the_policy_argument_lists_the_daemons_names_and_default() -> None:
    """At a listing the policy becomes one of the names the daemon gave, its default said."""
    spec = tool_named("allocate")
    assert spec is not None
    listed = with_policies(spec.input_schema, ["packed", "simple"], "packed")
    policy = listed["properties"]["policy"]
    assert policy["enum"] == ["packed", "simple"] and "packed" in policy["description"]
    assert "enum" not in spec.input_schema["properties"]["policy"]  # the catalog unchanged
    assert with_policies(spec.input_schema, [], "") == spec.input_schema  # no daemon: free
