"""The package's shape, kept by a test: one namespace, layers that import one way only.

Bottom to top — a module may import its own package and any layer below it, never above:

0. ``showtell.common`` (errors, flags, files) and ``showtell.v1`` (generated from the proto)
1. ``showtell.api``: the gRPC contract's Python side (transport security, the metrics client)
2. ``showtell.captioning``: data, model, weights — what both services share
3. ``showtell.trainer`` and ``showtell.evaluator``: the two services, which never import each other
4. ``showtell.cli`` (and ``cli_reference``), ``showtell.commands``: what a user runs
   (may share code) — and the services' ``__main__`` modules (``python -m showtell.trainer``), which
   are the command line's entry points, not the libraries'
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [
    ("showtell.common", "showtell.v1"),
    ("showtell.api", "showtell.metrics"),
    ("showtell.captioning",),
    ("showtell.trainer", "showtell.evaluator"),
    ("showtell.cli", "showtell.cli_reference", "showtell.commands", "showtell.__main__"),
]
SERVICES = 3  # the one layer whose members must not import each other
ENTRY_POINTS = ("showtell.trainer.__main__", "showtell.evaluator.__main__")  # layer 4, in layer 3's folders
GENERIC = ("trainer", "evaluator", "captioning", "protos")  # folder names, not import names


def _package_dirs() -> dict[str, Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = config["package-dir"]
    dirs = {}
    for package in config["packages"]:
        root = max((name for name in mapping if package == name or package.startswith(name + ".")), key=len)
        dirs[package] = ROOT / mapping[root] / package.removeprefix(root).lstrip(".").replace(".", "/")
    return dirs


def _modules() -> dict[str, Path]:
    modules = {}
    for package, folder in _package_dirs().items():
        for path in folder.glob("*.py"):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path
    return modules


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every absolute import in the file, function bodies included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def _layer(module: str) -> tuple[int, str] | None:
    if module in ENTRY_POINTS:
        return len(LAYERS) - 1, module
    for level, owners in enumerate(LAYERS):
        for owner in owners:
            if module == owner or module.startswith(owner + "."):
                return level, owner
    return None


def test_every_package_folder_is_listed_in_pyproject():
    """A subpackage folder missing from ``packages`` would be left out of the wheel."""
    listed = {folder.resolve() for folder in _package_dirs().values()}
    on_disk = {init.parent.resolve() for top in ("showtell", "trainer", "evaluator", "captioning")
               for init in (ROOT / top).rglob("__init__.py")}
    assert on_disk == listed, f"on disk, not listed: {on_disk - listed}; listed, missing: {listed - on_disk}"


def test_every_module_belongs_to_a_layer():
    modules = _modules()
    assert len(modules) > 60
    orphans = [name for name in modules if name != "showtell" and _layer(name) is None]
    assert not orphans, f"add these to a layer in {__file__}: {orphans}"


def test_layers_import_one_way():
    wrong = []
    for name, path in _modules().items():
        if name == "showtell":
            continue
        level, owner = _layer(name)
        for line, target in _imports(path):
            if not target.startswith("showtell."):
                continue
            target_level, target_owner = _layer(target) or (0, "showtell")
            upward = target_level > level
            across = target_level == level and target_owner != owner and level == SERVICES
            if upward or across:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({owner}, layer {level}) imports {target} "
                             f"(layer {target_level})")
    assert not wrong, "\n".join(wrong)


# The configuration modules: typed dataclasses that import nothing of the command line (their
# options and checks come from the leaf ``common.options``; ``common.flags`` makes them flags).
CONFIG_MODULES = ("showtell.captioning.config", "showtell.trainer.config", "showtell.evaluator.config",
                  "showtell.common.options")
COMMAND_LINE = ("argparse", "showtell.common.flags", "showtell.cli")


def test_the_configuration_imports_nothing_of_the_command_line():
    modules = _modules()
    wrong = [f"{name}:{line} imports {target}" for name in CONFIG_MODULES
             for line, target in _imports(modules[name])
             if any(target == c or target.startswith(c + ".") for c in COMMAND_LINE)]
    assert wrong == []
    assert [t for _, t in _imports(modules["showtell.common.options"]) if t.startswith("showtell.")] == []


def import_graph() -> dict[str, set[str]]:
    """Each module → the showtell modules it imports (function bodies included)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        graph[name] = set()
        for _, target in _imports(path):
            parts = target.split(".")
            owner = next((".".join(parts[:i]) for i in range(len(parts), 0, -1)
                          if ".".join(parts[:i]) in modules), None)
            if owner and owner != name:
                graph[name].add(owner)
    return graph


def longest_chain(graph: dict[str, set[str]], start: str) -> list[str]:
    """The longest chain of imports from ``start`` to a leaf (the graph has no cycles below it)."""
    memo: dict[str, list[str]] = {}

    def chain(module: str, seen: frozenset[str]) -> list[str]:
        if module not in memo:
            longest = max((chain(t, seen | {module}) for t in graph[module] if t not in seen), key=len,
                          default=[])
            memo[module] = [module, *longest]
        return memo[module]

    return chain(start, frozenset())


def dispatched(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with the imports ``importlib`` makes: ``showtell.cli`` → each command's module (read
    from its ``COMMANDS`` table, as it dispatches)."""
    tree = ast.parse((ROOT / "showtell" / "cli.py").read_text())
    table = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "COMMANDS" for t in node.targets))
    commands = {module for module, _ in ast.literal_eval(table).values()}
    assert commands and commands <= set(graph), commands - set(graph)
    found = {m for m in graph if m.startswith("showtell.metrics.")}  # the registry imports its folder
    return {**graph, "showtell.cli": graph["showtell.cli"] | commands,
            "showtell.metrics": graph["showtell.metrics"] | found}


# At most 8 modules from the console script (pyproject's ``showtell = showtell.cli:entry``) to a
# leaf, measured through its dispatch; the three ``python -m`` modules are that one import more.
# The controllers depend on protocols — the trainer's on Saver, Schedule, Stop and StepTask, the
# task on a FeatureSource, the evaluator's actions and service on the best export's (Exporter,
# ExportView) — and the model dir's file names and the contract's words sit low
# (common.model_dir, api.contract).
CHAIN_CEILING = {"showtell.cli": 8, **dict.fromkeys(("showtell.__main__", "showtell.trainer.__main__",
                                                      "showtell.evaluator.__main__"), 9)}


@pytest.mark.parametrize("entry", sorted(CHAIN_CEILING))
def test_no_import_chain_from_a_command_grows(entry: str):
    chain = longest_chain(dispatched(import_graph()), entry)
    assert len(chain) <= CHAIN_CEILING[entry], " → ".join(chain)


def test_the_chain_is_measured_through_the_dispatch():
    """Every command's module is reached from the entry (a chain the dispatch hides counts), and a
    module one step further down lengthens the measured chain: a planted import is seen."""
    graph = dispatched(import_graph())
    chain = longest_chain(graph, "showtell.__main__")
    static = import_graph()["showtell.cli"]  # what the dispatch hides from a reader of imports
    assert chain[:2] == ["showtell.__main__", "showtell.cli"] and chain[2] not in static
    planted = {**graph, chain[-1]: {"showtell.planted"}, "showtell.planted": set()}
    assert len(longest_chain(planted, "showtell.__main__")) == len(chain) + 1


def test_the_chain_measure_finds_the_longest():
    graph = {"a": {"b", "c"}, "b": {"d"}, "c": set(), "d": {"e"}, "e": set()}
    assert longest_chain(graph, "a") == ["a", "b", "d", "e"]


EVALUATOR_LAYERS = [  # bottom to top, as CONTRIBUTING.md draws them
    ("records",), ("config",), ("loop",), ("scoring",), ("serving",),
    ("daemon",), ("__main__",),
]


def test_the_evaluators_parts_import_downwards():
    """records ← config ← loop ← scoring ← serving ← daemon: each part may import its own folder
    and those below — the loop never the service (which reads only the loop's ``Status``), nor
    the scoring: the loop owns what it asks of an evaluator and gets back (``loop/protocol.py``),
    and the scoring implements it."""
    level = {part: i for i, parts in enumerate(EVALUATOR_LAYERS) for part in parts}
    wrong = []
    for module, path in _modules().items():
        if not module.startswith("showtell.evaluator."):
            continue
        own = module.split(".")[2]
        assert own in level, f"{module}: not in EVALUATOR_LAYERS (add it where it belongs)"
        for line, name in _imports(path):
            if name.startswith("showtell.evaluator."):
                other = name.split(".")[2]
                if other != own and level.get(other, -1) >= level[own]:
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert wrong == []


@pytest.mark.parametrize("folder", ["showtell", "trainer", "evaluator", "captioning", "tests", "bench"])
def test_code_imports_the_namespace_not_the_folders(folder):
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {target}"
             for path in (ROOT / folder).rglob("*.py")
             for line, target in _imports(path) if target.split(".")[0] in GENERIC]
    assert not wrong, "import showtell.<name> instead:\n" + "\n".join(wrong)


PRIVATE_HOME = "showtell.captioning.internals"


def test_private_tensorflow_and_keras_names_live_in_one_module():
    """``keras.src``, ``tensorflow.python`` and underscore modules are not public API: one module
    holds them (with why), so an upgrade that moves one breaks one place."""
    wrong = []
    for name, path in _modules().items():
        if name == PRIVATE_HOME or name.startswith("showtell.v1"):  # v1: generated by grpc_tools
            continue
        for line, target in _imports(path):
            parts = target.split(".")
            if parts[:2] in (["keras", "src"], ["tensorflow", "python"]) or any(
                    p.startswith("_") and not p.startswith("__") for p in parts[:-1]):
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not wrong, f"move these into {PRIVATE_HOME}:\n" + "\n".join(wrong)


def test_no_test_module_imports_another_and_conftest_holds_only_fixtures():
    """Shared test code lives in modules made for it (``helpers``, ``fakes``, …), not in a test
    module another imports; conftest.py defines fixtures (and private helpers of fixtures) only."""
    tests = Path(__file__).resolve().parent
    crossing = []
    for module in sorted(tests.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            crossing += [f"{module.name}: {n}" for n in names
                         if n.startswith(("tests.test_", "tests.conftest"))]
    assert crossing == []
    conftest = ast.parse((tests / "conftest.py").read_text())
    public = [n.name for n in conftest.body if isinstance(n, ast.FunctionDef | ast.ClassDef)
              and not n.name.startswith("_")
              and not any("fixture" in ast.unparse(d) for d in getattr(n, "decorator_list", []))]
    assert public == []


def test_no_function_is_longer_than_a_screen():
    """Setup reads in one screen: no function over 60 lines in the services and the entry (the
    generated gRPC code aside) — a longer one is split where its parts have names."""
    long = []
    for folder in ("trainer", "evaluator", "showtell"):
        for module in sorted((ROOT / folder).rglob("*.py")):
            if module.parent.name == "v1":
                continue
            for node in ast.walk(ast.parse(module.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) \
                        and node.end_lineno - node.lineno + 1 > 60:
                    long.append(f"{module.relative_to(ROOT)}:{node.lineno} {node.name} "
                                f"({node.end_lineno - node.lineno + 1} lines)")
    assert long == []


def test_the_cli_knows_every_package_the_services_extra_adds():
    """A client-only install running a service command names the extra it lacks: the CLI's
    module → package table covers the `services` extra exactly."""
    import re

    from showtell.cli import SERVICE_MODULES

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    packages = {re.split(r"[<>=~\[ ]", requirement)[0] for requirement in extras["services"]}
    assert set(SERVICE_MODULES.values()) == packages
    assert all(requirement.startswith("showtell[services]") or "tensorflow" in requirement
               for extra in ("cpu", "and-cuda") for requirement in extras[extra])


def test_no_product_file_is_over_400_lines():
    """A module that outgrows a few screens holds more than one job: split it by job (the generated
    gRPC code aside)."""
    long = {str(path.relative_to(ROOT)): n for path in _modules().values()
            if "_pb2" not in path.name and (n := len(path.read_text().splitlines())) > 400}
    assert long == {}
