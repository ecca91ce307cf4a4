"""The chart's image, as a node runs it: loaded into a containerd from the OCI archive that
`make image` writes, run by runc as uid 10001 on a read-only root (docs/node.md).

Builds the image first (scripts/build-image.sh: about three minutes from nothing, seconds when
nothing changed). Needs root: it starts a containerd of its own.

    .venv/bin/pytest e2e/node/test_image.py
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.node.containerd import Containerd, running_containerd
from e2e.node.probe import build_image

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "build" / "image" / "staticfleet.oci.tar"
BUILD_RECORD = ROOT / "build" / "image" / "build.json"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# The chart's securityContext (runAsUser, runAsGroup, fsGroup) and the Dockerfile's USER.
UID = GID = 10001

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def archive() -> Path:
    return build_image()


@pytest.fixture(scope="module")
def containerd() -> Iterator[Containerd]:
    subprocess.run([str(ROOT / "scripts" / "node" / "install-packages.sh")], check=True)
    with running_containerd(ROOT / "build" / "node" / "containerd-test") as cd:
        yield cd


@pytest.fixture(scope="module")
def image(archive: Path, containerd: Containerd) -> str:
    return containerd.import_image(archive)


def _run(containerd: Containerd, image: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return containerd.run(image, argv, read_only=True)


def test_archive_names_the_chart_image(image: str) -> None:
    # The chart's `image: staticfleet:<appVersion>` as containerd (and a kubelet) spells it.
    assert image == f"docker.io/library/staticfleet:{VERSION}"
    record = json.loads(BUILD_RECORD.read_text())
    assert record["archive_ref"] == image
    assert record["archive_bytes"] == ARCHIVE.stat().st_size


def test_cli_runs_on_a_read_only_root(containerd: Containerd, image: str) -> None:
    proc = _run(containerd, image, "staticfleet", "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"staticfleet {VERSION}"


def test_runs_as_the_charts_uid_and_gid(containerd: Containerd, image: str) -> None:
    proc = _run(containerd, image, "sh", "-c", "id -u; id -g")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(UID), str(GID)]


def test_root_filesystem_is_read_only(containerd: Containerd, image: str) -> None:
    proc = _run(containerd, image, "sh", "-c", "touch /home/staticfleet/x")
    assert proc.returncode != 0
    assert "Read-only file system" in proc.stderr


def test_operator_and_member_commands_load(containerd: Containerd, image: str) -> None:
    # The chart's two commands: each imports its whole stack (Kopf for the operator) at --help.
    for command in (["operator", "run"], ["member", "run"]):
        proc = _run(containerd, image, "staticfleet", *command, "--help")
        assert proc.returncode == 0, proc.stderr
        assert "usage: staticfleet " + " ".join(command) in proc.stdout


def test_the_operator_and_the_coordinator_import_in_the_image(
    containerd: Containerd, image: str
) -> None:
    # --help parses arguments only; the code the commands run is imported after it (the
    # operator's app.py once needed `cryptography`, which the image lacked).
    modules = "staticfleet_operator.app, coordinator.server.app, staticfleet.member"
    proc = _run(containerd, image, "python", "-c", f"import {modules}")
    assert proc.returncode == 0, proc.stderr
