"""The MCP tools without a daemon: arguments checked against their schemas before anything is
sent, and the SDK imported by `gpuallocctl mcp` alone."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from gpuallocd.errors import InvalidRequest
from gpuallocd.mcp.arguments import check_arguments
from gpuallocd.mcp.catalog import TOOLS, tool_named


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


def test_without_the_sdk_the_command_says_what_to_install() -> None:
    """`gpuallocctl mcp` where the SDK is missing: one line naming the extra, exit 1."""
    script = (
        "import sys; sys.modules['mcp'] = None\n"
        "from gpuallocd.cli import main; sys.argv = ['gpuallocctl', 'mcp']; main()"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 1
    assert "pip install 'gpuallocd[mcp]'" in done.stderr
    assert "Traceback" not in done.stderr
