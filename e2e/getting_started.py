"""docs/getting-started.md, run as written: its `sh` blocks, section by section, with the
e2e cluster's kubectl and helm (so the guide a user follows cannot rot). Steps 1 and 2 make a
kind cluster and load the image into it; the e2e's own node does both instead, so the runner
starts at step 3.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster import Cluster

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "getting-started.md"
# Sections a cluster of kind or minikube needs, which the e2e's node replaces.
FIRST_STEP = 3

_SECTION = re.compile(r"^## (\d+)\. (.+)$", re.M)
_SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)


@dataclass(frozen=True, slots=True)
class Step:
    number: int
    title: str
    script: str  # the section's sh blocks, in order


def steps(text: str) -> list[Step]:
    """The numbered sections from FIRST_STEP on that hold sh blocks."""
    found: list[Step] = []
    heads = list(_SECTION.finditer(text))
    for head, following in zip(heads, [*heads[1:], None], strict=True):
        number = int(head.group(1))
        body = text[head.end() : following.start() if following is not None else len(text)]
        blocks = _SH_BLOCK.findall(body)
        if number >= FIRST_STEP and blocks:
            found.append(Step(number, head.group(2), "".join(blocks)))
    return found


def run_step(cluster: Cluster, step: Step, bin_dir: Path, timeout_s: float = 1200.0) -> float:
    """Run one step's commands in bash (-e: the first failing command fails the step, as a
    user would stop there) from the repository's root; its duration in seconds."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, target in (("kubectl", cluster.kubectl_bin), ("helm", cluster.helm_bin)):
        link = bin_dir / name
        if not link.exists():
            link.symlink_to(target)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(cluster.kubeconfig),
    }
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", step.script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"docs/getting-started.md step {step.number} ({step.title}) exited "
            f"{proc.returncode}:\n{step.script}\n--- stdout\n{proc.stdout[-4000:]}\n"
            f"--- stderr\n{proc.stderr[-4000:]}"
        )
    return time.monotonic() - started
