"""A real node beside the e2e control plane: kubelet v1.36.3 on this machine's cgroup v1 goes
Ready and runs a pod of the chart's image, with Debian's containerd 1.6 and with containerd v2;
kube-proxy and CoreDNS give its pods the `kubernetes` Service by name (e2e/node/probe.py,
docs/node.md). Then the machine is as it was.

Builds what is absent first: the control plane (e2e/build.sh), the node's binaries and pause
image (scripts/node/build.sh; kubelet alone takes ~10 minutes from nothing) and the chart's
image (scripts/build-image.sh). Needs root.

    .venv/bin/pytest e2e/node/test_node.py
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from e2e.node import probe

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

pytestmark = pytest.mark.timeout(3600)


@pytest.fixture(scope="module")
def built() -> None:
    subprocess.run([str(ROOT / "e2e" / "build.sh")], check=True, timeout=3600)
    subprocess.run([str(ROOT / "scripts" / "node" / "build.sh")], check=True, timeout=3600)
    probe.build_image()


def _host_state() -> dict[str, object]:
    """What a node run could leave behind on the host."""
    return {
        "kube_chains": sorted(probe.kube_chains()),
        "kernel": probe.kernel_settings(),
        "netns": sorted(os.listdir(probe.NETNS_DIR)) if probe.NETNS_DIR.is_dir() else [],
        "links": subprocess.run(
            ["ip", "-br", "link"], capture_output=True, text=True, check=True
        ).stdout.split("\n"),
        "mounts": [
            line for line in Path("/proc/self/mounts").read_text().splitlines() if "/node/" in line
        ],
        "host_paths": [str(p) for p in probe.HOST_PATHS if p.exists()],
        # kubelet, kube-proxy, CoreDNS, containerd v2 and its shims run from build/node/bin.
        "node_processes": _node_processes(),
    }


def _node_processes() -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            exe = os.readlink(proc / "exe")
        except OSError:
            continue
        if exe.startswith(str(probe.NODE_BIN)):
            found.append(exe)
    return sorted(found)


@pytest.mark.parametrize("containerd", ["debian", "v2"])
def test_node_goes_ready_and_runs_the_image(built: None, containerd: str) -> None:
    before = _host_state()
    workdir = ROOT / "build" / "node" / f"run-test-{containerd}"
    code = probe.run(workdir, 180.0, containerd, Path("/usr/bin/runc"))
    record = (workdir / "probe.json").read_text()
    assert code == 0, record  # each stage's outcome, error and log tail
    stages = json.loads(record)["stages"]
    assert [s["outcome"] for s in stages] == ["ok"] * 9
    version, in_cluster = stages[-2], stages[-1]
    assert version["phase"] == "Succeeded"
    # Read through the API server's pods/log, which fetches it from the kubelet.
    assert version["output"] == [f"staticfleet {VERSION}"]
    # The pod resolved the API server's Service name through CoreDNS and called it through
    # kube-proxy's rules with its projected ServiceAccount token: /version 200, pods 403.
    assert in_cluster["phase"] == "Succeeded"
    assert [json.loads(line) for line in in_cluster["output"]] == [
        {"pods": 403, "resolved": "10.96.0.1", "version": 200}
    ]
    assert _host_state() == before
