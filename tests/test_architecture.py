"""The shape of the code: dependencies point one way, no cycles, small modules, one error tree."""

from __future__ import annotations

import ast
import functools
import inspect
from collections.abc import Iterator
from pathlib import Path

import gpulease.errors as client_errors
import pytest

import gpuallocd
from gpuallocd import errors

PACKAGE = Path(gpuallocd.__file__).parent
MAX_MODULE_LINES = 400

# What each package may import from gpuallocd (besides itself, `errors` and the top package).
ALLOWED = {
    "model": set(),
    "topology": {"model"},
    "policies": {"model"},
    "ledger": {"model"},
    "inventory": {"model", "topology"},
    "planning": {"model", "policies", "topology"},
    "processes": {"model", "host"},
    "allocator": {"model", "policies", "ledger", "processes", "enforcement"},
    "enforcement": {"model", "integrations", "processes"},
    "api": {"model", "allocator", "policies", "topology"},
    "metrics": {"model", "allocator", "api", "inventory"},
    "charts": {"model"},
    "dashboard": {"model", "allocator", "api", "charts", "ledger"},
    "host": set(),
    "daemon": {
        "model",
        "allocator",
        "api",
        "enforcement",
        "host",
        "inventory",
        "integrations",
        "ledger",
        "metrics",
        "processes",
        "dashboard",
    },
    "integrations": {"model"},
    "mcp": {"model", "planning", "policies", "topology"},
    "cli": {
        "model",
        "charts",
        "host",
        "integrations",
        "inventory",
        "mcp",
        "planning",
        "policies",
        "topology",
    },
    "testing": {"model", "inventory", "topology"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, name: str) -> Iterator[str]:
    """Every gpuallocd module `path` imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("gpuallocd"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            if base.startswith("gpuallocd"):
                yield from _targets(base, [a.name for a in node.names])


def _targets(base: str, names: list[str]) -> Iterator[str]:
    """`from base import names`: the submodules named, and `base` itself for any other name."""
    modules = _modules()
    submodules = [f"{base}.{name}" for name in names if f"{base}.{name}" in modules]
    yield from submodules
    if len(submodules) < len(names):
        yield base


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        name: {target for target in _imports(path, name) if target in modules and target != name}
        for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else None


def test_there_is_no_import_cycle() -> None:
    """No set of gpuallocd modules imports itself round, lazily imported modules included."""
    assert _cycles(_graph()) == []


def test_nothing_outside_testing_imports_testing() -> None:
    """The fakes serve tests and third parties; the daemon and the CLI never depend on them."""
    offenders = [
        (name, target)
        for name, targets in _graph().items()
        if _package_of(name) != "testing"
        for target in targets
        if _package_of(target) == "testing"
    ]
    assert offenders == []


def test_dependencies_point_one_way() -> None:
    """socket → api → allocator → policies / ledger → model: each package imports only below."""
    offenders = []
    for name, targets in _graph().items():
        package = _package_of(name)
        if package is None:
            continue
        allowed = ALLOWED[package] | {package}
        offenders += [
            (name, target)
            for target in targets
            if (other := _package_of(target)) is not None and other not in allowed
        ]
    assert offenders == []


def test_every_package_has_a_place_in_the_map() -> None:
    """Each package is in ALLOWED above and in the map of docs/architecture.md."""
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert packages == sorted(ALLOWED)
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    assert [p for p in packages if f"`{p}/`" not in doc] == []


def test_at_most_three_files_stand_at_the_top() -> None:
    """The top of the package is `__init__`, `__main__` and `errors`; the rest is in packages."""
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == [
        "__init__.py",
        "__main__.py",
        "errors.py",
    ]


def test_no_module_is_longer_than_400_lines() -> None:
    """Split before a file passes 400 lines."""
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def _parents(cls: type, root: type) -> list[str]:
    return [c.__name__ for c in inspect.getmro(cls) if issubclass(c, root) and c is not root]


@pytest.mark.parametrize("code", sorted(errors.error_classes()))
def test_the_client_error_tree_mirrors_the_daemons(code: str) -> None:
    """Each wire code is a client class of the same name, code and parents as the daemon's."""
    server = errors.error_classes()[code]
    client = client_errors.ERROR_CLASSES[code]
    assert client.__name__ == server.__name__
    assert _parents(client, client_errors.GpuallocError) == _parents(server, errors.GpuallocError)


def test_local_errors_never_travel() -> None:
    """Startup and input-file errors are not wire codes, so no client can receive one."""
    assert not any(issubclass(c, errors.LocalError) for c in errors.error_classes().values())


@pytest.mark.parametrize("cls", sorted(errors.error_classes().values(), key=lambda c: c.code))
def test_an_error_takes_only_its_own_detail_keys(cls: type[errors.GpuallocError]) -> None:
    """A code carries the same detail keys wherever it is raised: others are refused at once."""
    with pytest.raises(TypeError):
        cls("message", not_a_detail_key=1)
    assert cls("message", **dict.fromkeys(cls.detail_keys, 1)).details.keys() == cls.detail_keys


def test_every_detail_key_is_documented() -> None:
    """docs/api.md names each code's detail keys."""
    doc = (PACKAGE.parent / "docs" / "api.md").read_text()
    missing = [
        (cls.code, key)
        for cls in errors.error_classes().values()
        for key in cls.detail_keys
        if f"`{key}`" not in doc
    ]
    assert missing == []
