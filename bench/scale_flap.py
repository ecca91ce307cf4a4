"""A flapping spec.replicas against the operator: rebalances with and without the scale-down
stabilization window (docs/operator.md, "Autoscaling").

The kmock tier (tests/operator/kube_harness.py): the real Kopf operator against kmock's
Kubernetes emulator, the embedded coordinator in process, and the harness's kubelet playing
each member pod with an in-process member (heartbeats every 100 ms). A group of 4 members
settles; then spec.replicas flaps 4 -> 6 -> 4 ... (20 changes, one every 3 s, ending at 4:
an autoscaler whose metric sits on a threshold), and the run waits until the group is Stable
at 4 again. Counted from the coordinator's journal and the operator's writes:
rebalances (`generation_started`), batch LeaveGroups (`MembersLeft` Events), pods created
and deleted.

    python -m bench.run --only scale_flap          # 20 flaps over 60 s, windows 0 and 30 s
    python -m bench.run --only scale_flap --quick  # 6 flaps over 6 s, windows 0 and 3 s
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.operator.kube_harness import Cluster, managed_spec, running_cluster

START = 4
HIGH = 6


async def _flap(flaps: int, every_s: float, window_s: int) -> dict[str, Any]:
    async with running_cluster() as cluster:
        spec = managed_spec(replicas=START, scaleDown={"stabilizationWindowSeconds": window_s})
        await cluster.create_group("orders", spec)
        await cluster.eventually(lambda: cluster.group_settled("orders", START), timeout=60)
        since = max(e.seq for e in await cluster.journal("orders"))
        writes_before = len(cluster.actions())
        started = time.monotonic()
        for flap in range(flaps):
            await cluster.update_spec("orders", {"replicas": HIGH if flap % 2 == 0 else START})
            await asyncio.sleep(every_s)
        flapped = time.monotonic()
        await _settled(cluster, since, window_s + 60)
        settled = time.monotonic()
        journal = await cluster.journal("orders", since)
        actions = cluster.actions()[writes_before:]
        leaves = sum(a.verb == "event" and a.name == "MembersLeft" for a in actions)
        return {
            "window_seconds": window_s,
            "flaps": flaps,
            "flap_every_seconds": every_s,
            "rebalances": sum(e.kind == "generation_started" for e in journal),
            "batch_leave_groups": leaves,
            "pods_created": sum(a.verb == "create" and a.kind == "Pod" for a in actions),
            "pods_deleted": sum(a.verb == "delete" and a.kind == "Pod" for a in actions),
            "scale_down_held_events": sum(
                a.verb == "event" and a.name == "ScaleDownHeld" for a in actions
            ),
            "flapping_seconds": round(flapped - started, 1),
            "settled_after_last_flap_seconds": round(settled - flapped, 1),
        }


async def _settled(cluster: Cluster, since: int, timeout_s: float) -> None:
    """Stable at START with START pods and no rebalance for a second (the held scale-down
    has run, if there is one)."""

    async def quiet() -> bool:
        if not await cluster.group_settled("orders", START):
            return False
        if len(await cluster.pods("orders")) != START:
            return False
        last = max(e.seq for e in await cluster.journal("orders", since - 1))
        await asyncio.sleep(1.0)
        return bool(
            await cluster.group_settled("orders", START)
            and max(e.seq for e in await cluster.journal("orders", since - 1)) == last
        )

    await cluster.eventually(quiet, timeout=timeout_s, what=f"Stable at {START}")


def run(quick: bool) -> dict[str, Any]:
    flaps, every_s, window_s = (6, 1.0, 3) if quick else (20, 3.0, 30)
    runs = [asyncio.run(_flap(flaps, every_s, window)) for window in (0, window_s)]
    return {
        "tier": "kmock (tests/operator/kube_harness.py), embedded coordinator",
        "group": f"{START} members, spec.replicas {START} <-> {HIGH}, ending at {START}",
        "runs": runs,
    }
