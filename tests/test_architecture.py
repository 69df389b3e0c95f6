"""The shape of the code: dependencies point one way, no cycles, small modules, one error tree."""

from __future__ import annotations

import ast
import functools
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import gpulease.errors as client_errors
import pytest

import gpuallocd
from gpuallocd import errors

PACKAGE = Path(gpuallocd.__file__).parent
# An alarm, not a steer: a module past this many lines is flagged, so that someone looks at
# whether it still does one job. Split by what a module does, never to get under a number.
ALARM_MODULE_LINES = 600

# What each package may import from gpuallocd (besides itself, `errors` and the top package).
ALLOWED = {
    "model": set(),
    "topology": {"model"},
    "policies": {"model"},
    "ledger": {"model"},
    "inventory": {"model", "topology", "host"},
    "planning": {"model", "policies", "topology"},
    "processes": {"model", "host"},
    "allocator": {"model", "policies", "ledger", "processes", "enforcement", "host"},
    "enforcement": {"model", "integrations", "processes", "host"},
    "api": {"model", "allocator", "policies", "topology", "host"},
    "metrics": {"model", "allocator", "api", "inventory", "host"},
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
        "notify",
    },
    "integrations": {"model", "host"},
    "notify": {"model", "host"},
    "mcp": {"model", "planning", "policies", "topology", "host"},
    "cli": {
        "model",
        "charts",
        "host",
        "integrations",
        "inventory",
        "mcp",
        "notify",
        "planning",
        "policies",
        "topology",
    },
    "testing": {"model", "inventory", "topology"},
}


@functools.cache
def _tree(path: Path) -> ast.Module:
    """The module at `path`, parsed once per test process (the tests only read it)."""
    return ast.parse(path.read_text())


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the module at `path`, as `ast.walk` gives them."""
    return tuple(ast.walk(_tree(path)))


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, name: str) -> Iterator[str]:
    """Every gpuallocd module `path` imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _nodes(path):
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


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Each module's gpuallocd imports (parsed once: the tests only read it)."""
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


DOCS = PACKAGE.parent / "docs"
WHERE_THINGS_GO = (
    "add a budget kind",
    "add an MCP tool",
    "change how a share's energy is estimated",
    "add a recorded machine",
)


def _section(text: str, title: str) -> str:
    """The body of the `## title` section of a markdown page."""
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _named_paths(text: str) -> list[str]:
    """The paths a text names in backquotes: a word with a slash, or a file name."""
    quoted = re.findall(r"`([^`\s]+)`", text)
    return [q for q in quoted if "/" in q or re.fullmatch(r"[\w.-]+\.(py|md|toml|json)", q)]


def test_where_things_go_names_paths_that_exist() -> None:
    """docs/architecture.md's "Where things go" names the changes a newcomer looks for, and
    every path it names exists (in the package, else from the repository's root)."""
    section = _section((DOCS / "architecture.md").read_text(), "Where things go")
    assert [task for task in WHERE_THINGS_GO if f"| {task}" not in section] == []
    paths = _named_paths(section)
    missing = [
        path
        for path in paths
        if not (PACKAGE / path).exists() and not (PACKAGE.parent / path).exists()
    ]
    assert len(paths) > 20 and missing == []


def test_at_most_four_files_stand_at_the_top() -> None:
    """The top of the package is `__init__`, `__main__`, `errors` and `text` (what users
    control, escaped for every printer: the CLI and the daemon's log, standard library
    only, so that `run` pays nothing for it); the rest is in packages."""
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == [
        "__init__.py",
        "__main__.py",
        "errors.py",
        "text.py",
    ]


def test_no_module_passes_the_length_alarm() -> None:
    """A module this long usually does two jobs: look, and split it by what it does."""
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > ALARM_MODULE_LINES
    }
    assert long == {}


def test_every_module_names_its_job() -> None:
    """Each module opens with a docstring that says what its one job is."""
    silent = [
        name
        for name, path in _modules().items()
        if not (ast.get_docstring(_tree(path)) or "").strip() and path.name != "__main__.py"
    ]
    assert silent == []


# The floors inside packages that have rooms: what each room may import of its siblings.
# A room is a sub-package; the package's own top-level modules are its door.
ROOMS = {
    "gpuallocd.allocator": {
        "site": set(),
        "power": set(),
        "leases": {"site", "power"},
        "queue": {"leases", "site", "power"},
        "unleased": {"leases", "site", "power"},
        "notices": {"leases", "site"},
        "preemption": {"leases", "site", "queue", "notices"},
        "desks": {"leases", "site", "power", "queue", "unleased", "notices", "preemption"},
    },
    "gpuallocd.daemon": {
        "config": set(),
        "startup": {"config"},
        "ledger_care": {"config", "startup"},
    },
    "gpuallocd.cli": {
        "leasing": set(),
        "looking": set(),
        "administering": {"looking"},
        "offline": set(),
        "notifying": set(),
    },
}
# A package's top room: it may import every module of the door but the package's own
# `__init__` (which imports it), and no room or door module imports it.
TOP_ROOMS = {"gpuallocd.allocator": "desks"}
# Door modules a room may import: they import nothing of their own package.
DOOR_LEAVES = {
    "gpuallocd.allocator": {"worker", "long_reads", "bells", "crash_points"},
    "gpuallocd.daemon": {"logformat"},
    "gpuallocd.cli": {
        "app",
        "common",
        "errors",
        "exit_codes",
        "lazy",
        "output",
        "quantities",
        "quick_exit",
        "style",
        "table_fit",
        "topology_input",
        "text",
    },
}


def _room_of(module: str, package: str) -> str | None:
    rest = module.removeprefix(package + ".")
    if rest == module or "." not in rest:
        return None
    return rest.split(".")[0]


@pytest.mark.parametrize("package", sorted(ROOMS))
def test_rooms_keep_to_their_floors(package: str) -> None:
    """Inside a package with rooms, a room imports only the rooms below it and the door's
    leaves; the door may import any room."""
    offenders = []
    for name, targets in _graph().items():
        room = _room_of(name, package)
        if room is None:
            continue
        allowed = ROOMS[package][room] | {room}
        leaves = DOOR_LEAVES[package]
        for target in targets:
            if not target.startswith(package + "."):
                continue
            other = _room_of(target, package)
            leaf = target.removeprefix(package + ".")
            if (other is None and leaf not in leaves and room != TOP_ROOMS.get(package)) or (
                other is not None and other not in allowed
            ):
                offenders.append((name, target))
    assert offenders == []


@pytest.mark.parametrize("package", sorted(TOP_ROOMS))
def test_only_the_door_enters_the_top_room(package: str) -> None:
    """The top room (the allocator's desks) is imported by the package's `__init__` alone:
    no other room and no module of the door reaches up into it."""
    top = f"{package}.{TOP_ROOMS[package]}"

    def inside(module: str) -> bool:
        return module == top or module.startswith(top + ".")

    offenders = sorted(
        (name, target)
        for name, targets in _graph().items()
        if name.startswith(package + ".") and not inside(name)
        for target in targets
        if inside(target)
    )
    assert offenders == []


@pytest.mark.parametrize("package", sorted(ROOMS))
def test_door_leaves_stay_leaves(package: str) -> None:
    """The door's modules that rooms may import import nothing else of the package."""
    graph = _graph()
    offenders = [
        (f"{package}.{leaf}", target)
        for leaf in DOOR_LEAVES[package]
        for target in graph[f"{package}.{leaf}"]
        if target.startswith(package + ".")
        and target.removeprefix(package + ".") not in DOOR_LEAVES[package]
    ]
    assert offenders == []


def _mapped(package_dir: Path) -> list[str]:
    """Modules and rooms of a package that its `__init__` docstring does not name."""
    doc = ast.get_docstring(ast.parse((package_dir / "__init__.py").read_text())) or ""
    names = [
        p.name
        for p in sorted(package_dir.iterdir())
        if (p.suffix == ".py" and p.name not in {"__init__.py", "__main__.py"})
        or (p.is_dir() and (p / "__init__.py").exists())
    ]
    return [n for n in names if (n + "/" if not n.endswith(".py") else n) not in doc]


@pytest.mark.parametrize(
    "package_dir",
    [
        PACKAGE / "allocator",
        PACKAGE / "cli",
        PACKAGE / "daemon",
        PACKAGE / "daemon" / "config",
        PACKAGE / "daemon" / "startup",
        PACKAGE / "daemon" / "ledger_care",
        PACKAGE / "api",
        PACKAGE / "allocator" / "desks",
        PACKAGE / "allocator" / "leases",
        PACKAGE / "allocator" / "site",
        PACKAGE / "allocator" / "queue",
        PACKAGE / "allocator" / "unleased",
        PACKAGE / "allocator" / "power",
        PACKAGE / "allocator" / "preemption",
        PACKAGE / "cli" / "leasing",
        PACKAGE / "cli" / "looking",
        PACKAGE / "cli" / "administering",
        PACKAGE / "cli" / "offline",
    ],
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_package_map_is_complete(package_dir: Path) -> None:
    """A room's `__init__` names every module and room in it: the map a newcomer reads."""
    assert _mapped(package_dir) == []


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


# Rules with one home, and the modules allowed to hold them: a second home is a test failure.
USER_DATABASE_READERS = {
    "gpuallocd.host.users",  # the one cache every reader of the daemon asks
    "gpuallocd.cli.common",  # the CLI's lookups, once per process (no host/ at start-up)
}


def _names_used(path: Path) -> set[str]:
    """The modules `path` imports and the attributes it reads, by name."""
    found: set[str] = set()
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add(node.module or "")
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def test_only_the_user_database_reads_the_user_database() -> None:
    """pwd, grp and getgrouplist are read in host/users.py (and the CLI's own lookups), so
    every reader sees one version of the database, dropped when its files change."""
    readers = sorted(
        name
        for name, path in _modules().items()
        if _names_used(path) & {"pwd", "grp", "getgrouplist"}
    )
    assert readers == sorted(USER_DATABASE_READERS)


def _trees() -> Iterator[tuple[str, ast.AST]]:
    for name, path in _modules().items():
        yield name, _tree(path)


def _literals(node: ast.AST) -> set[object]:
    elements = node.elts if isinstance(node, (ast.Set, ast.Tuple, ast.List)) else []
    return {e.value for e in elements if isinstance(e, ast.Constant)}


def test_the_events_that_end_a_lease_have_one_home() -> None:
    """Which events end a lease is `ENDING_EVENT` of model/lease.py (and `ENDINGS`, made of
    it); no module lists them again, in Python or in SQL."""
    ends = {"freed", "expired", "revoked"}
    offenders = sorted(
        name
        for name, tree in _trees()
        for node in ast.walk(tree)
        if ends <= _literals(node)
        or (isinstance(node, ast.Constant) and all(f"'{e}'" in str(node.value) for e in ends))
    )
    assert offenders == []


CLIENT = Path(client_errors.__file__).parent
LEASE_ID_HOME = CLIENT / "lease_id.py"


def _spells_lease_id(node: ast.AST) -> bool:
    """`"GPUALLOCD_LEASE_ID"`, `b"GPUALLOCD_LEASE_ID="` or an f-string's `...GPUALLOCD_LEASE_ID=`
    as a value, a pattern of 12 hex digits, or `token_hex(6)`."""
    name = "GPUALLOCD_LEASE_ID"
    if isinstance(node, ast.Call):
        six = any(isinstance(a, ast.Constant) and a.value == 6 for a in node.args)
        return getattr(node.func, "attr", None) == "token_hex" and six
    value = node.value if isinstance(node, ast.Constant) else None
    text = value.decode(errors="replace") if isinstance(value, bytes) else value
    if not isinstance(text, str):
        return False
    return text in (name, name + "=") or text.endswith(" " + name + "=") or "{12}" in text


def _lease_id_spellings(path: Path) -> list[int]:
    """Lines of `path` that spell the lease id's variable or format."""
    tree = _tree(path)
    return [getattr(node, "lineno", 0) for node in ast.walk(tree) if _spells_lease_id(node)]


def test_the_lease_id_variable_and_format_have_one_home() -> None:
    """GPUALLOCD_LEASE_ID and the id's format (12 hex digits) are spelled in gpulease's
    `lease_id.py` only: the daemon imports them from the client, never the other way."""
    paths = [*_modules().values(), *sorted(CLIENT.glob("*.py"))]
    offenders = {
        str(p): lines for p in paths if p != LEASE_ID_HOME and (lines := _lease_id_spellings(p))
    }
    assert offenders == {}
    assert _lease_id_spellings(LEASE_ID_HOME) != []


def test_one_judge_of_loopback() -> None:
    """Whether an address is this machine only is model/addresses.py's `is_loopback` (an
    IPv4-mapped address as its IPv4 self): no module asks `ipaddress` again or defines
    another."""
    home = "gpuallocd.model.addresses"
    offenders = sorted(
        (name, getattr(node, "lineno", 0))
        for name, tree in _trees()
        if name != home
        for node in ast.walk(tree)
        if (isinstance(node, ast.Attribute) and node.attr in {"is_loopback", "ipv4_mapped"})
        or (isinstance(node, ast.FunctionDef) and node.name.strip("_") == "is_loopback")
    )
    assert offenders == []


# Modules that write files by name besides the one writer, and why they may.
OWN_FILE_WRITERS = {
    "gpuallocd.host.files": "the one writer of a file another user may reach",
    "gpuallocd.ledger.backups": "SQLite writes the backup itself, in the private state dir",
    "gpuallocd.daemon.ledger_care.recovery": "moves the ledger's files in the private state dir",
    "gpuallocd.daemon.startup.integrity": "its marker and what it sets aside: private state dir",
    "gpuallocd.daemon.startup.statelock": "the lock's holder file, opened O_NOFOLLOW, in place",
}


def test_files_are_replaced_one_way() -> None:
    """A file is written by temporary name and rename (O_EXCL, O_TRUNC, mkstemp, os.replace,
    os.rename) only in host/files.py's `write_file`, and in the modules above, each for the
    reason given; `open(..., "w")` on a path is nowhere."""
    writes = {"O_EXCL", "O_TRUNC", "mkstemp", "NamedTemporaryFile", "replace", "rename"}
    offenders = sorted(
        (name, node.lineno)
        for name, tree in _trees()
        if name not in OWN_FILE_WRITERS and not name.startswith("gpuallocd.testing")
        for node in ast.walk(tree)
        if (
            isinstance(node, ast.Attribute)
            and node.attr in writes
            and isinstance(node.value, ast.Name)
            and node.value.id in {"os", "tempfile"}
        )
        or (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "open"
            and any(
                isinstance(a, ast.Constant) and str(a.value)[:1] in ("w", "a", "x")
                for a in node.args[1:]
            )
        )
    )
    assert offenders == []


def test_a_waiter_and_a_held_gpu_are_worded_in_one_place() -> None:
    """`held for bob (queue 1)` and `queued 1 of 2 (12s): ...` are built by
    model/queue_text.py for the CLI, the MCP server and the dashboard; no other module puts
    those lines together (an f-string's `held for `, ` (queue `, `queued ` pieces)."""
    home = "gpuallocd.model.queue_text"
    offenders = sorted(
        (name, node.lineno)
        for name, tree in _trees()
        if name != home
        for joined in ast.walk(tree)
        if isinstance(joined, ast.JoinedStr)
        for node in joined.values
        if isinstance(node, ast.Constant)
        and (node.value in ("held for ", " (queue ") or str(node.value).endswith("queued "))
    )
    assert offenders == []


# What bounds a request (its TTL, its power cap, its preemption terms) is resolved once, at
# the grant, in allocator/site/request_bounds.py with the pure rules it composes.
REQUEST_BOUND_RULES = {
    "gpuallocd.allocator.site.ttl",
    "gpuallocd.allocator.site.request_bounds",
    "gpuallocd.allocator.power.caps",
    "gpuallocd.allocator.power.budget",
}
REQUEST_BOUND_NAMES = {
    "granted_ttl",
    "expected_ttl",
    "longest_ttl",
    "preempt_terms",
    "resolve_terms",
    "power_cap",
    "ttl_bounds",
    "card_caps",
    "terms_of",
}


def _names_anywhere(path: Path) -> set[str]:
    """Every name `path` imports, reads or calls: imported names, plain names, attributes."""
    found: set[str] = set()
    for node in _nodes(path):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(alias.name.rpartition(".")[2] for alias in node.names)
        elif isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def test_a_request_is_resolved_at_the_grant_not_in_the_api() -> None:
    """The API passes a request through: it imports no rule that bounds one and calls none
    (the data the body becomes, such as `PreemptAsk`, it may build)."""
    api = {name: path for name, path in _modules().items() if name.startswith("gpuallocd.api")}
    imported = sorted(
        (name, target) for name in api for target in _graph()[name] if target in REQUEST_BOUND_RULES
    )
    used = sorted(
        (name, found)
        for name, path in api.items()
        for found in _names_anywhere(path) & (REQUEST_BOUND_NAMES | {"resolved"})
    )
    assert imported == [] and used == []


def test_the_bounds_of_a_request_are_resolved_by_the_lifecycle_alone() -> None:
    """Only the lease lifecycle resolves a request's terms, for the grant and its preview."""
    callers = sorted(
        name
        for name, path in _modules().items()
        if "resolve_terms" in _names_anywhere(path)
        and name != "gpuallocd.allocator.site.request_bounds"
    )
    assert callers == ["gpuallocd.allocator.leases.lifecycle"]


# The lease lifecycle grants and ends leases; the parts it grants with (allocator/leases/
# parts.py) are handed to whoever uses them by the composition root, never reached through it.
LIFECYCLE_HOME = "gpuallocd.allocator.leases.lifecycle"
LIFECYCLE_NAMES = {"lifecycle", "_lifecycle"}


def _names_lifecycle(node: ast.AST) -> bool:
    """`lifecycle`, `_lifecycle`, or an attribute of that name (`self._lifecycle`)."""
    if isinstance(node, ast.Name):
        return node.id in LIFECYCLE_NAMES
    return isinstance(node, ast.Attribute) and node.attr in LIFECYCLE_NAMES


def _lifecycle_surface() -> set[str]:
    """The public names the lifecycle's class defines: its methods and properties."""
    from gpuallocd.allocator.leases.lifecycle import LeaseLifecycle

    return {name for name in vars(LeaseLifecycle) if not name.startswith("_")}


def _reaches_through(tree: ast.AST, surface: set[str]) -> list[tuple[int, str]]:
    """Each `lifecycle.X` whose X is not a method or property of the class (a part it holds,
    a private attribute), and each chain `lifecycle.X.Y`."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _names_lifecycle(node.value)
            and node.attr not in surface
        ):
            found.append((node.lineno, node.attr))
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and _names_lifecycle(node.value.value)
        ):
            found.append((node.lineno, f"{node.value.attr}.{node.attr}"))
    return found


def test_nothing_reaches_through_the_lifecycle() -> None:
    """Outside lifecycle.py, a lifecycle is used by its methods and properties alone: no
    `lifecycle.X` where X is not one the class defines (the parts it holds are private: a
    module that needs the quota, the node view, the drains, the reservations, the lease
    hardware or the settings is handed them), and no chain `lifecycle.X.Y` through what
    one returns (`lifecycle.topology.gpus`: the node view is handed out for that). A
    lifecycle is held under the name `lifecycle` or `_lifecycle` (checked below), so the
    rule sees every use."""
    surface = _lifecycle_surface()
    offenders = {
        name: found
        for name, tree in _trees()
        if name != LIFECYCLE_HOME and (found := _reaches_through(tree, surface))
    }
    assert offenders == {}


def test_the_lifecycle_shows_none_of_its_parts() -> None:
    """No method or property of the lifecycle is named as one of its parts (the fields of
    SharedParts), so that none is read as `lifecycle.<part>`."""
    from dataclasses import fields

    from gpuallocd.allocator.leases.parts import SharedParts

    parts = {f.name for f in fields(SharedParts)} | {"parts"}
    assert _lifecycle_surface() & parts == set()


def _annotated_lifecycle(annotation: ast.AST | None) -> bool:
    return annotation is not None and "LeaseLifecycle" in ast.unparse(annotation)


def _misnamed_lifecycles(tree: ast.AST) -> list[tuple[int, str]]:
    """Parameters and names annotated `LeaseLifecycle`, and names a lifecycle (made, or
    taken from one) is assigned to, that are not called `lifecycle` or `_lifecycle`."""
    held: list[tuple[int, ast.AST | str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _annotated_lifecycle(node.annotation):
            held.append((node.lineno, node.arg))
        elif isinstance(node, ast.AnnAssign) and _annotated_lifecycle(node.annotation):
            held.append((node.lineno, node.target))
        elif isinstance(node, ast.Assign):
            value = node.value
            made = isinstance(value, ast.Call) and "LeaseLifecycle" in ast.unparse(value.func)
            if made or _names_lifecycle(value):
                held += [(node.lineno, target) for target in node.targets]
    return [
        (line, name if isinstance(name, str) else ast.unparse(name))
        for line, name in held
        if not (name in LIFECYCLE_NAMES if isinstance(name, str) else _names_lifecycle(name))
    ]


def test_a_lifecycle_is_always_called_lifecycle() -> None:
    """Every parameter, field or name holding a lease lifecycle is called `lifecycle` or
    `_lifecycle`: what lets the rule above see every use of one."""
    offenders = {name: found for name, tree in _trees() if (found := _misnamed_lifecycles(tree))}
    assert offenders == {}


# The allocator is made in one place: the daemon's composition root. The recovery makes the
# lifecycle of its rebuilt ledger the same way, from the same parts.
ALLOCATOR_MAKERS = {
    "SharedParts": {"gpuallocd.daemon.assembly", "gpuallocd.daemon.ledger_care.rebuild"},
    "LeaseLifecycle": {"gpuallocd.daemon.assembly", "gpuallocd.daemon.ledger_care.rebuild"},
    "AllocatorFacade": {"gpuallocd.daemon.assembly"},
}


def _makes(tree: ast.AST, cls: str) -> bool:
    """Whether `tree` calls `cls(...)` or `cls.of(...)`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "of":
                func = func.value
            if isinstance(func, ast.Name) and func.id == cls:
                return True
    return False


@pytest.mark.parametrize("cls", sorted(ALLOCATOR_MAKERS))
def test_the_allocator_is_made_in_one_place(cls: str) -> None:
    """The shared parts, the lifecycle and the façade are made in daemon/assembly.py (and
    the recovery's lifecycle in its rebuild): a reader finds where each part comes from."""
    makers = {name for name, tree in _trees() if _makes(tree, cls)}
    assert makers == ALLOCATOR_MAKERS[cls]


def test_the_model_packages_lazy_names_are_those_it_imports_for_type_checkers() -> None:
    """`gpuallocd.model` reads each name from its module when first asked for: the names it
    serves, the names type checkers see (its TYPE_CHECKING imports) and `__all__` are the
    same, each from the same module, and asking for any other name is an AttributeError."""
    import gpuallocd.model as model

    init = PACKAGE / "model" / "__init__.py"
    checked: dict[str, str] = {}
    for node in ast.walk(_tree(init)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpuallocd.model."):
            checked |= {alias.name: node.module or "" for alias in node.names}
    served = {name: f"gpuallocd.model.{home}" for name, home in model._HOME_OF.items()}
    assert served == checked
    assert sorted(model.__all__) == sorted(checked)
    for name, home in checked.items():
        assert getattr(model, name) is getattr(__import__(home, fromlist=[name]), name)
    with pytest.raises(AttributeError):
        model.NoSuchThing  # noqa: B018
