"""The docs name what exists: Python names, pip extras, the operator's Event and condition
reasons; and no doc ends in an empty section."""

from __future__ import annotations

import ast
import importlib
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(
    {
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
        # Not hidden directories: `.pytest_cache/README.md` is pytest's, and exists only after
        # a first run, so a clean clone collected three tests fewer than a used checkout.
        *(p for p in ROOT.glob("*/README.md") if not p.parent.name.startswith(".")),
        *ROOT.glob("examples/*/README.md"),
        *ROOT.glob("charts/*/README.md"),
    }
)
# The chart's README names values keys (`coordinator.port`), not Python names.
PYTHON_DOCS = [doc for doc in DOCS if "charts" not in doc.parts]
OPERATOR = ROOT / "operator" / "staticfleet_operator"
# `pkg.module.name` (optionally called) in backticks, for our own packages.
DOTTED = re.compile(
    r"`((?:coordinator|staticfleet|staticfleet_operator|pipeline|bench)"
    r"(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\([^`]*\))?`"
)
FILE_SUFFIXES = (".py", ".json", ".md", ".yaml", ".db", ".jsonl", ".png", ".txt")
# Attributes of an instance a doc names by its variable (`coordinator.is_ready`).
INSTANCE_ATTRIBUTES = {"coordinator.is_ready"}


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("doc", PYTHON_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_name_a_doc_gives_exists(doc: Path) -> None:
    names = {
        m.group(1)
        for m in DOTTED.finditer(doc.read_text())
        if not m.group(1).endswith(FILE_SUFFIXES) and m.group(1) not in INSTANCE_ATTRIBUTES
    }
    assert [name for name in sorted(names) if not resolves(name)] == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_extra_a_doc_names_exists(doc: Path) -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    named = {
        extra.strip()
        for group in re.findall(r"(?:\.|staticfleet)\[([a-z,\s]+)\]", doc.read_text())
        for extra in group.split(",")
    }
    assert named <= extras, named - extras


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_doc_ends_with_an_empty_section(doc: Path) -> None:
    last = [line for line in doc.read_text().splitlines() if line.strip()][-1]
    assert not last.startswith("#"), last


def _event_reasons() -> set[str]:
    reasons = set()
    for path in OPERATOR.rglob("*.py"):
        text = path.read_text()
        # An Event of the pass (actions.Event), by its literal reason or a named constant
        # (pass_plan's TOKEN_UNAVAILABLE = "MemberTokenUnavailable", ...).
        reasons |= set(re.findall(r"\bEvent\(\s*\"([A-Za-z]+)\"", text))
        reasons |= set(re.findall(r"^[A-Z_]+ = \"((?:[A-Z][a-z]+){2,})\"$", text, re.M))
        reasons |= set(re.findall(r"event_reason: ClassVar\[str\] = \"([A-Za-z]+)\"", text))
    # A paused rollout's Event is named by its blocker's code.
    from staticfleet_operator.blockers import BlockerCode

    return reasons | {code.value for code in BlockerCode}


def _condition_reasons() -> set[str]:
    """The PascalCase string constants of status.py: the reasons its conditions carry."""
    tree = ast.parse((OPERATOR / "status.py").read_text())
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"(?:[A-Z][a-z]+){2,}", node.value)
    }


def test_operator_doc_lists_every_event_and_condition_reason() -> None:
    doc = (ROOT / "docs" / "operator.md").read_text()
    section = doc[doc.index("## Events and conditions") :]
    section = section[: section.index("\n## ", 1)]
    events, conditions = _event_reasons(), _condition_reasons()
    assert {"MemberBounced", "MembersLeft", "InvalidSpec"} <= events  # the scan finds them
    assert {"GroupStable", "AsExpected"} <= conditions
    documented = set(re.findall(r"`([A-Za-z]+)`", section))
    assert sorted((events | conditions) - documented) == []
    from staticfleet_operator.crd.models import ConditionType

    assert {kind.value for kind in ConditionType} <= documented


def test_the_getting_started_guide_gives_the_e2e_its_steps() -> None:
    # e2e/node/test_12_getting_started.py runs these as written on the real node.
    from e2e.getting_started import GUIDE, steps

    found = steps(GUIDE.read_text())
    assert [step.number for step in found] == [3, 4, 5, 6, 7]
    scripts = "".join(step.script for step in found)
    assert "helm install" in scripts and "kubectl -n orders scale" in scripts
    assert "kind " not in scripts and "make image" not in scripts  # the node does those
