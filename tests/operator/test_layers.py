"""The operator's layers hold: no import circle, the plan reaches no I/O, and docs/operator.md's
"Layers" table names every module.

Imports are read from the source (every `import`, those under `TYPE_CHECKING` included: a
circle hidden there is still a circle a reader has to walk)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "staticfleet_operator"
NAME = "staticfleet_operator"

# Modules that do I/O or hold the clients: the pure rooms must not reach them.
IO_MODULES = {
    "actuator",
    "app",
    "context",
    "handlers",
    "informer",
    "kube",
    "observed",
    "observer",
    "passes",
    "peering",
    "readiness",
    "reconcile",
    "webhook",
}
PURE_MODULES = [
    "pass_plan",
    "group_observation",
    "actions",
    "group_memory",
    "hot_standby",
    "promotion",
    "expected_members",
    "scaling",
    "status",
    "members",
    "owned",
    "tokens",
    "blockers",
    "group_ref",
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """module -> the package's modules it imports (subpackages by their top module)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == NAME:
                    targets = [alias.name for alias in node.names]
                elif node.module.startswith(NAME + "."):
                    targets = [node.module[len(NAME) + 1 :]]
            elif isinstance(node, ast.Import):
                targets = [
                    a.name[len(NAME) + 1 :] for a in node.names if a.name.startswith(NAME + ".")
                ]
            for target in targets:
                top = target.split(".")[0]
                if top and top != name.split(".")[0]:
                    found.add(top)
        top = name.split(".")[0]
        if top:
            graph.setdefault(top, set()).update(found)
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def test_no_module_of_the_operator_imports_itself_through_others() -> None:
    graph = _imports()
    circles = sorted(module for module in graph if module in _reachable(graph, module))
    assert circles == []


@pytest.mark.parametrize("module", PURE_MODULES)
def test_the_plan_and_the_rules_reach_no_io(module: str) -> None:
    assert _reachable(_imports(), module) & IO_MODULES == set()


def test_the_layers_table_names_every_module() -> None:
    text = (ROOT / "docs" / "operator.md").read_text()
    layers = text[text.index("## Layers") : text.index("**One spec change, walked through.**")]
    missing = sorted(
        module
        for module in _imports()
        if module and f"`{module}.py`" not in layers and f"`{module}/`" not in layers
    )
    assert missing == []
