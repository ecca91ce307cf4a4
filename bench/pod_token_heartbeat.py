"""What a pod token costs a heartbeat: one static member heartbeating over loopback HTTP with
a group token and with a pod's ServiceAccount token (reviewed once by aiohttp's path, then
answered by the fast path from the cache). The review itself is a stub answering at once: this
measures the server's side, not the API server's (one review a minute per member).

    .venv/bin/python -m bench.pod_token_heartbeat [--beats 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from coordinator import CoordinatorConfig, GroupCoordinator, SqliteStore
from coordinator.server import AuthConfig, create_app, start_server
from coordinator.server.pod_identity import (
    POD_NAME_EXTRA,
    POD_UID_EXTRA,
    Binding,
    PodAuth,
    ReviewCache,
)

GROUP = "orders"
GROUP_TOKEN = "group-token-for-orders"
POD_TOKEN = "eyJhbGciOiJSUzI1NiJ9.cG9k.c2ln"
AUDIENCE = "staticfleet-coordinator"


async def review(token: str, audiences: tuple[str, ...]) -> Mapping[str, Any]:
    return {
        "authenticated": True,
        "audiences": list(audiences),
        "user": {
            "username": "system:serviceaccount:team:orders",
            "extra": {POD_NAME_EXTRA: ["orders-0"], POD_UID_EXTRA: ["uid-0"]},
        },
    }


async def beats(url: str, token: str, count: int) -> list[float]:
    headers = {"Authorization": f"Bearer {token}"}
    join = {
        "group_id": GROUP,
        "session_timeout_ms": 30000,
        "rebalance_timeout_ms": 5000,
        "member_id": "",
        "group_instance_id": "orders-0",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": ""}],
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{url}/v1/groups/{GROUP}/join", json=join, headers=headers) as r:
            joined = await r.json()
            assert r.status == 200, joined
        beat = {
            "group_id": GROUP,
            "generation_id": joined["generation_id"],
            "member_id": joined["member_id"],
            "group_instance_id": "orders-0",
        }
        body = json.dumps(beat).encode()
        latencies = []
        for _ in range(count):
            started = time.perf_counter()
            async with http.post(
                f"{url}/v1/groups/{GROUP}/heartbeat",
                data=body,
                headers={**headers, "Content-Type": "application/json"},
            ) as r:
                await r.read()
                assert r.status == 200
            latencies.append((time.perf_counter() - started) * 1e6)
        return latencies


async def main(count: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, token in (("group_token", GROUP_TOKEN), ("pod_token", POD_TOKEN)):
        with tempfile.TemporaryDirectory() as tmp:
            cache = ReviewCache(review, AUDIENCE, time.time)
            coordinator = GroupCoordinator(
                config=CoordinatorConfig(group_initial_rebalance_delay_ms=0),
                store=SqliteStore(Path(tmp) / "c.db"),
            )
            app = create_app(
                coordinator,
                AuthConfig(member_tokens={GROUP: frozenset({GROUP_TOKEN})}),
                pod_auth=PodAuth(
                    cache, {("team", "orders-0"): Binding(GROUP, "orders-0", "uid-0")}
                ),
            )
            server = await start_server(app, "127.0.0.1", 0, shutdown_timeout=2.0)
            try:
                latencies = await beats(server.url, token, count)
            finally:
                await server.stop()
            ordered = sorted(latencies)
            results[name] = {
                "beats": count,
                "p50_us": round(statistics.median(ordered), 1),
                "p99_us": round(ordered[int(len(ordered) * 0.99) - 1], 1),
                "reviews": cache.reviews,
            }
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beats", type=int, default=2000)
    print(json.dumps(asyncio.run(main(parser.parse_args().beats)), indent=2))
