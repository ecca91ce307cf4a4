"""Reproducible installs: the LICENSE pyproject declares, and constraints.txt covering pyproject."""

from __future__ import annotations

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
