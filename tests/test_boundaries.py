"""The dependency rule of docs/architecture.md §1, read off the source: every module's imports, parsed with
`ast` (no interpreter started, so it runs in the unit tier), checked against one table of rules. Rooms are
module prefixes, so a new module is covered by the folder it lives in.

    cli ─────► service ──► worker.contract ──► smart_core.config
     │  └─► smartune ──────────┘ ▲
     └──► worker.tune ──► worker.training ─┴──► smart_core ──► torch
    research ──► public seams only;  nothing of the product ──► research or tests

Two kinds of import are read. *Import time*: the statements that run when a module is imported (module
and class bodies, not function bodies, not `if TYPE_CHECKING:`), followed transitively through our own
modules: what importing a room loads. *Any*: every import statement in a room's modules, lazy ones
included: what a room may ever reach. tests/integration/test_import_boundaries.py checks the same rooms
in fresh interpreters, where third-party packages' own imports count too.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("smart_core", "worker", "service", "cli", "smartune", "bench")
PACKAGES = (*PRODUCT, "research")
OURS = frozenset((*PACKAGES, "tests"))
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


@dataclass(frozen=True)
class Imports:
    at_import: frozenset[str]  # dotted names imported when the module is imported
    anywhere: frozenset[str]  # every dotted name any statement of the module imports


@dataclass(frozen=True)
class Rule:
    """`room` (a module prefix) may import only `only` (prefixes; None: anything) and never `never`; `when`
    is "import" (transitively, what importing the room loads) or "any" (every statement, lazy included)."""

    room: str
    when: str
    never: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None
    why: str = ""
    ours_only: bool = False  # `only` limits our own packages, not third-party ones
    besides: tuple[str, ...] = ()  # rooms inside `room` that the rule leaves to rules of their own


# What research may use of the product: its public seams, named one module at a time (a change to one of
# these is an API change for research/; anything else of the product is private to it).
PUBLIC_SEAMS = (
    "smartune", "smart_core", "worker.contract", "bench", "tests.support",
    "service.engine.scheduler", "service.engine.pool", "service.engine.ray_jobs",  # the pool's model, Ray's jobs
    "worker.training.finetune", "worker.training.adapter", "worker.training.data",  # one training run
    "worker.training.metrics", "worker.training.models", "worker.training.sampling",  # which rows a run uses
    "worker.tune.placement", "worker.tune.settings", "worker.tune.tracking",  # a sweep's placement, its runs
)  # fmt: skip
SERVICE_EDGE = ("service.api", "service.http", "service.dashboard", "service.main", "service.server")
RULES: tuple[Rule, ...] = (
    Rule("smart_core.config", "import", only=("smart_core", "smart_core.config"),
         why="the method vocabulary imports nothing, so the contract may read it"),
    Rule("smart_core", "import", only=("smart_core", "torch"), besides=("smart_core.integrations",),
         why="torch only, model-agnostic"),
    Rule("smart_core", "any", never=("smart_core.integrations",), besides=("smart_core.integrations",),
         why="the core never reaches the optional integrations"),
    Rule("smart_core.integrations", "import", only=("smart_core", "torch", "transformers", "accelerate"),
         why="SMART in other people's loops (Trainer, accelerate): the `hf` extra, never the worker"),
    Rule("worker.contract", "import",
         only=("worker", "worker.contract", "smart_core", "smart_core.config", "pydantic", "yaml"),
         why="plain data: pydantic and the method vocabulary"),
    Rule("worker.contract", "any", never=("smartune", "service", "cli", "bench", "research", "tests",
                                          "worker.training", "worker.tune", "torch", "ray", "mlflow"),
         why="the contract sits below the SDK, the service and the worker's other rooms"),
    Rule("worker.training", "import", never=("ray", "mlflow", "fastapi", "sqlalchemy", "worker.tune",
                                             "service", "cli", "smartune"),
         why="one fine-tuning run: torch + transformers, no Ray, no MLflow, no sweep"),
    Rule("worker.tune", "any", never=("service", "cli", "smartune"), why="the worker never calls up"),
    Rule("service", "import", never=("torch", "transformers", "ray", "mlflow"),
         why="the control plane starts light: Ray's Jobs client and MLflow's client load lazily"),
    Rule("service", "any", never=("torch", "transformers", "cli", "worker.training", "worker.tune",
                                  "smart_core.objective", "smart_core.adversarial", "smart_core.bregman"),
         why="the service reaches the worker only through worker.contract"),
    Rule("service.store", "any", never=("service.engine", *SERVICE_EDGE),
         why="the store knows neither the engine nor the HTTP edge"),
    Rule("service.engine", "any", never=("service.api", "service.dashboard", "service.main", "service.server"),
         why="the engine never reaches up into the HTTP edge"),
    Rule("service.datasets", "any", never=("service.engine", *SERVICE_EDGE), why="uploads: the store only"),
    Rule("service.costs", "any", never=SERVICE_EDGE, why="estimates and budgets know no HTTP"),
    Rule("service.storage", "any", never=("service.engine", *SERVICE_EDGE),
         why="a team's disk: the engine calls its keeper, the routes its checks"),
    Rule("service.notify", "any", never=("service.engine", *SERVICE_EDGE),
         why="webhooks: the engine calls its notifier, the routes its registry"),
    Rule("service.http", "any", never=("service.api", "service.dashboard"), why="middleware, not routes"),
    Rule("service.api", "any", never=("service.dashboard",), why="the pages build on the REST edge"),
    Rule("smartune", "import", only=("smartune",), why="`import smartune` loads the standard library only"),
    Rule("smartune", "any", never=("cli", "service", "worker.training", "worker.tune", "smart_core",
                                   "worker.contract.spec", "torch", "pydantic"),
         why="the SDK needs httpx (and PyYAML for spec files) only"),
    Rule("cli.main", "import", only=("cli", "smartune", "smart_core", "smart_core.config"),
         why="a thin shell: each subcommand imports its side lazily"),
    *(Rule(p, "any", never=("research", "tests"), why="the product never imports research or tests")
      for p in PRODUCT),
    Rule("research", "any", only=PUBLIC_SEAMS, ours_only=True, why="research uses the product's public seams only"),
)  # fmt: skip


def module_name(path: Path, root: Path = ROOT) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def read_sources(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, str]:
    """Every module of the packages that exist under root, by dotted name."""
    return {
        module_name(path, root): path.read_text(encoding="utf-8")
        for package in packages
        if (root / package).is_dir()
        for path in sorted((root / package).rglob("*.py"))
        if "alembic" not in path.parts or path.name == "env.py"
    }


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def parse_imports(module: str, source: str, is_package: bool, known: Iterable[str]) -> Imports:
    """The dotted names a module imports, at import time and anywhere; `from a import b` counts `a.b`
    too where that is a known module."""
    known = set(known)
    at_import, anywhere = _statements(module, source, is_package)

    def modules(found: frozenset[tuple[str, str]]) -> frozenset[str]:
        return frozenset(n for base, sub in found for n in (base, f"{base}.{sub}") if n == base or n in known)

    return Imports(modules(at_import), modules(anywhere))


@functools.cache
def _statements(
    module: str, source: str, is_package: bool
) -> tuple[frozenset[tuple[str, str]], frozenset[tuple[str, str]]]:
    """(module, name) of each import, at import time and anywhere: cached, parsed once per source."""
    at_import: set[tuple[str, str]] = set()
    anywhere: set[tuple[str, str]] = set()

    def names(node: ast.Import | ast.ImportFrom) -> set[tuple[str, str]]:
        if isinstance(node, ast.Import):
            return {(alias.name, "") for alias in node.names}
        return {(_absolute(module, is_package, node), a.name) for a in node.names}

    def walk(nodes: Iterable[ast.AST], runs: bool) -> None:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found = names(node)
                anywhere.update(found)
                if runs:
                    at_import.update(found)
            elif isinstance(node, ast.If) and _is_type_checking(node):
                walk(node.body, False)
                walk(node.orelse, runs)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                walk(ast.iter_child_nodes(node), False)
            else:
                walk(ast.iter_child_nodes(node), runs)

    walk(ast.parse(source).body, True)
    return frozenset(at_import), frozenset(anywhere)


def _with_parents(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def import_graph(sources: Mapping[str, str]) -> dict[str, Imports]:
    packages = {m.rpartition(".")[0] for m in sources}
    return {m: parse_imports(m, s, m in packages, sources) for m, s in sources.items()}


def loaded_by(module: str, graph: Mapping[str, Imports]) -> set[str]:
    """What importing `module` loads: our modules transitively (with their packages), others by name."""
    seen: set[str] = set()
    todo = sorted(_with_parents(module))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in graph:
            todo.extend(p for n in graph[name].at_import for p in _with_parents(n) if p not in seen)
    return seen


def _matches(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _allowed(name: str, only: Iterable[str]) -> bool:
    """Within `only`, or a package above something in it (importing a module loads its packages)."""
    return any(name == p or name.startswith(p + ".") or p.startswith(name + ".") for p in only)


def _outside(name: str, room: str) -> bool:
    top = name.split(".")[0]
    return top not in STDLIB and not _matches(name, (room,)) and name not in _with_parents(room)


def violations(sources: Mapping[str, str], rules: Iterable[Rule] = RULES) -> list[str]:
    """One line per import that breaks a rule: `module imports name (rule: why)`."""
    graph = import_graph(sources)
    found: list[str] = []
    for rule in rules:
        for module in sorted(m for m in graph if _matches(m, (rule.room,)) and not _matches(m, rule.besides)):
            reached = loaded_by(module, graph) if rule.when == "import" else set(graph[module].anywhere)
            outside = [n for n in reached if n and (_outside(n, rule.room) or _matches(n, rule.besides))]
            for name in sorted(outside):
                limited = rule.only is not None and (not rule.ours_only or name.split(".")[0] in OURS)
                if _matches(name, rule.never) or (limited and not _allowed(name, rule.only or ())):
                    found.append(f"{module} {'loads' if rule.when == 'import' else 'imports'} {name} "
                                 f"({rule.room}: {rule.why})")  # fmt: skip
    return found


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    return read_sources()


def test_every_room_keeps_the_dependency_rule(sources: dict[str, str]) -> None:
    assert violations(sources) == []


def test_every_rule_names_a_room_that_exists(sources: dict[str, str]) -> None:
    assert all(any(_matches(m, (rule.room,)) for m in sources) for rule in RULES)


def _planted(sources: dict[str, str], module: str, statement: str) -> dict[str, str]:
    return {**sources, module: f"{statement}\n{sources[module]}"}


@pytest.mark.parametrize(
    ("module", "statement", "expected"),
    [
        ("worker.contract.spec", "import smartune", "worker.contract.spec loads smartune"),
        ("worker.contract.grid", "def f():\n    import smartune.client", "imports smartune.client"),
        ("bench.step", "def f():\n    import research", "bench.step imports research"),
        ("service.jobs", "from research import stats", "service.jobs imports research"),
        ("service.store.crud", "from service.engine import dispatch", "imports service.engine.dispatch"),
        ("service.engine.watch", "from service.api import deps", "imports service.api.deps"),
        ("service.validation", "import torch", "loads torch"),
        ("smartune.client", "import cli.main", "smartune.client loads cli.main"),
        ("worker.training.loop", "import ray", "worker.training.loop loads ray"),
        ("smart_core.config", "import torch", "smart_core.config loads torch"),
        ("smart_core.objective", "import transformers", "smart_core.objective loads transformers"),
        ("smart_core.bregman", "def f():\n    import smart_core.integrations", "bregman imports smart_core"),
        ("smart_core.integrations.loss", "import worker.training.data", "loss loads worker.training.data"),
    ],
)
def test_a_planted_import_is_caught(
    sources: dict[str, str], module: str, statement: str, expected: str
) -> None:
    found = violations(_planted(sources, module, statement))
    assert any(expected in line for line in found), found


def test_a_lazy_or_type_only_import_is_not_an_import_time_one(sources: dict[str, str]) -> None:
    lazy = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\ndef f():\n    import torch"
    found = violations(_planted(sources, "service.validation", lazy))
    assert not [line for line in found if "loads torch" in line], found
    assert [line for line in found if "service.validation imports torch" in line], found  # but never at all


def test_research_is_not_shipped_in_the_wheel() -> None:
    import tomllib

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    included = found["include"]
    assert not [p for p in included if p.startswith(("research", "tests"))], included
