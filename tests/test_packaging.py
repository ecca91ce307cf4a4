"""Reproducible installs: the LICENSE pyproject declares, and constraints.txt covering pyproject."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not name==version"
            pins[canonicalize_name(name)] = version
    return pins


def test_license_file_is_the_license_pyproject_declares():
    assert _pyproject()["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_every_requirement_is_pinned_within_its_range():
    project = _pyproject()["project"]
    texts = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        texts.extend(extra)
    pins = _pins()
    problems = []
    for text in texts:
        req = Requirement(text)
        pinned = pins.get(canonicalize_name(req.name))
        if pinned is None:
            problems.append(f"{req.name}: not in constraints.txt (run make constraints)")
        elif not req.specifier.contains(pinned, prereleases=True):
            problems.append(f"{req.name}: pinned {pinned}, outside {req.specifier}")
    assert not problems, problems


def test_internals_the_code_relies_on_have_upper_bounds():
    project = _pyproject()["project"]
    texts = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        texts.extend(extra)
    specs = {str(canonicalize_name(Requirement(t).name)): Requirement(t).specifier for t in texts}
    for name in ("kopf", "aiohttp", "kubernetes-asyncio", "kafka-python", "kmock"):
        assert any(s.operator in ("<", "==") for s in specs[name]), (name, specs[name])


def test_image_build_and_install_use_the_constraints():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "-c constraints.txt" in dockerfile
    # The dependencies are wheeled before the sources are copied (the layer caches).
    assert dockerfile.index("-c constraints.txt") < dockerfile.index("COPY coordinator")
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()


def test_chart_names_its_home_and_sources():
    chart = yaml.safe_load((ROOT / "charts/staticfleet/Chart.yaml").read_text())
    assert chart["home"].startswith("https://")
    assert chart["sources"] and all(s.startswith("https://") for s in chart["sources"])


# What the image installs (`staticfleet[operator]`, Dockerfile) must provide every third-party
# module the operator and the coordinator import, lazily or not: an import the image lacks
# shows only when the code runs there (the operator pod on the e2e's real node found
# `cryptography`, imported by coordinator_cert.py but declared only by the kafka and dev
# extras).
IMAGE_EXTRAS = ("operator",)
IMAGE_CODE = ("coordinator", "operator/staticfleet_operator")


def _imported_top_levels(folder: Path) -> set[str]:
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def _image_distributions() -> set[str]:
    project = _pyproject()["project"]
    texts = list(project["dependencies"])
    for extra in IMAGE_EXTRAS:
        texts += project["optional-dependencies"][extra]
    return {canonicalize_name(Requirement(t).name) for t in texts}


def test_the_image_installs_every_module_the_operator_and_coordinator_import():
    ours = {"coordinator", "staticfleet", "staticfleet_operator", "pipeline"}
    imported = set().union(*(_imported_top_levels(ROOT / code) for code in IMAGE_CODE)) - ours
    provided = importlib.metadata.packages_distributions()
    third_party = {n for n in imported if n not in sys.stdlib_module_names}
    missing = {
        name: sorted(provided.get(name, ["(not installed)"]))
        for name in sorted(third_party)
        if not any(canonicalize_name(d) in _image_distributions() for d in provided.get(name, []))
        # A dependency's own dependency is installed with it (kopf brings aiohttp and
        # python-json-logger, kafka-python its own): counted through the install below.
        and not _installed_with_image(provided.get(name, []))
    }
    assert missing == {}


def _installed_with_image(distributions: list[str]) -> bool:
    """Whether one of `distributions` is required, directly or transitively, by what the
    image installs."""
    wanted = {canonicalize_name(d) for d in distributions}
    seen: set[str] = set()
    queue = sorted(_image_distributions())
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                queue.append(canonicalize_name(requirement.name))
    return bool(wanted & seen)
