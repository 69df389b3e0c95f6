"""The public surface is explicit, and the client speaks the server's error codes."""

from __future__ import annotations

import importlib
import inspect

import gpulease
import gpulease.errors
import pytest

from gpuallocd import errors


@pytest.mark.parametrize(
    "module_name",
    [
        "gpulease",
        "gpuallocd.errors",
        "gpuallocd.model",
        "gpuallocd.policies",
        "gpuallocd.topology",
        "gpuallocd.inventory",
        "gpuallocd.allocator",
        "gpuallocd.daemon",
        "gpuallocd.planning",
        "gpuallocd_jupyter",
        "gpuallocd.integrations",
    ],
)
def test_all_lists_every_public_name(module_name: str) -> None:
    """__all__ names exactly the module's public classes and functions defined or re-exported."""
    module = importlib.import_module(module_name)
    exported = set(module.__all__)
    assert all(hasattr(module, name) for name in exported)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", "").split(".")[0] == module_name.split(".")[0]
    }
    assert public <= exported, sorted(public - exported)


def test_client_has_a_class_for_every_server_code() -> None:
    """Every server error code maps back to a client exception class of the same name."""
    server = errors.error_classes()
    client = gpulease.errors.ERROR_CLASSES
    assert set(server) <= set(client)
    for code, server_class in server.items():
        assert client[code].__name__ == server_class.__name__, code


def test_error_codes_are_unique_per_class() -> None:
    """No two server error classes share a code (apart from the abstract parents)."""
    seen: dict[str, str] = {}
    for code, cls in errors.error_classes().items():
        assert code not in seen, (code, cls.__name__, seen.get(code))
        seen[code] = cls.__name__


def test_client_imports_only_the_standard_library() -> None:
    """gpulease pulls in no third-party package."""
    import subprocess
    import sys

    probe = (
        "import sys; before = set(sys.modules); import gpulease; "
        "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
        "third = [m for m in new if m not in sys.stdlib_module_names and m != 'gpulease']; "
        "print(','.join(sorted(third)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
