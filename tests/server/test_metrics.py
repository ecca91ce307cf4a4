"""/metrics: the Prometheus exposition shows the series after real traffic."""

from __future__ import annotations

import asyncio
import re

from prometheus_client.parser import text_string_to_metric_families

from coordinator import HeartbeatRequest
from coordinator.wire import to_json

from .conftest import GROUP_A, MEMBER_A_TOKEN, Server
from .messages import join_body


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_metrics_after_traffic(server: Server) -> None:
    path = f"/v1/groups/{GROUP_A}/join"
    joined = await asyncio.gather(
        server.call("POST", path, join_body(GROUP_A, "a-0"), token=MEMBER_A_TOKEN),
        server.call("POST", path, join_body(GROUP_A, "a-1"), token=MEMBER_A_TOKEN),
    )
    member_id = joined[0].body["member_id"]
    heartbeat = to_json(HeartbeatRequest(GROUP_A, 1, member_id, "a-0"))
    await server.call("POST", f"/v1/groups/{GROUP_A}/heartbeat", heartbeat, token=MEMBER_A_TOKEN)
    wrong_generation = to_json(HeartbeatRequest(GROUP_A, 99, member_id, "a-0"))
    await server.call("POST", f"/v1/groups/{GROUP_A}/heartbeat", wrong_generation)
    await server.call("POST", path, data=b"{", token=MEMBER_A_TOKEN)
    await server.call("GET", "/v1/groups", token=MEMBER_A_TOKEN)

    reply = await server.call("GET", "/metrics", token=None)
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/plain")
    samples = _samples(reply.text)
    group = (("group", GROUP_A),)
    assert samples[("staticfleet_group_rebalances_total", group)] >= 1
    assert samples[("staticfleet_group_generation", group)] == 1
    assert samples[("staticfleet_group_members", group)] == 2
    assert (
        samples[
            (
                "staticfleet_group_state",
                (*group, ("state", "CompletingRebalance")),
            )
        ]
        == 1
    )
    assert samples[("staticfleet_group_state", (*group, ("state", "Stable")))] == 0
    assert samples[("staticfleet_join_latency_seconds_count", ())] == 2
    # The join phase waited for the initial rebalance delay (50 ms).
    assert samples[("staticfleet_join_latency_seconds_sum", ())] >= 0.05
    assert ("staticfleet_sync_latency_seconds_count", ()) in samples
    assert samples[("staticfleet_heartbeats_total", (("error", "NONE"),))] == 1
    assert samples[("staticfleet_heartbeats_total", (("error", "ILLEGAL_GENERATION"),))] == 1
    errors = "staticfleet_request_errors_total"
    assert samples[(errors, (("error", "ILLEGAL_GENERATION"), ("operation", "heartbeat")))] == 1
    assert samples[(errors, (("error", "INVALID_REQUEST"), ("operation", "joinGroup")))] == 1
    assert (
        samples[(errors, (("error", "GROUP_AUTHORIZATION_FAILED"), ("operation", "listGroups")))]
        == 1
    )


async def test_deleted_group_leaves_the_gauges(server: Server) -> None:
    path = f"/v1/groups/{GROUP_A}/join"
    joined = await server.call("POST", path, join_body(GROUP_A, "a-0"))
    leave = {
        "group_id": GROUP_A,
        "members": [{"member_id": joined.body["member_id"], "group_instance_id": "a-0"}],
    }
    await server.call("POST", f"/v1/groups/{GROUP_A}/leave", leave)
    assert (await server.call("DELETE", f"/v1/groups/{GROUP_A}")).body["error"] == "NONE"
    text = (await server.call("GET", "/metrics", token=None)).text
    assert not re.search(r'staticfleet_group_(generation|members|state)\{group="group-a"', text)


async def test_default_series_are_exposed_once(server: Server) -> None:
    """process_*, python_info and the build info are in the server's registry; the operator's
    metrics on the same registry (as in `operator run`) do not register them twice."""
    from importlib import metadata

    from coordinator.server.context import CONTEXT
    from staticfleet_operator.metrics import OperatorMetrics

    OperatorMetrics(server.running.runner.app[CONTEXT].metrics.registry)
    text = (await server.call("GET", "/metrics", token=None)).text
    samples = _samples(text)
    build = [key for key in samples if key[0] == "staticfleet_build_info"]
    assert len(build) == 1 and samples[build[0]] == 1
    assert ("version", metadata.version("staticfleet")) in build[0][1]
    assert samples[("process_resident_memory_bytes", ())] > 0
    assert samples[("process_open_fds", ())] > 0
    assert any(key[0] == "python_info" for key in samples)
    assert text.count("# TYPE process_resident_memory_bytes ") == 1


def test_operator_registry_of_its_own_has_the_default_series() -> None:
    from prometheus_client import generate_latest

    from staticfleet_operator.metrics import OperatorMetrics

    text = generate_latest(OperatorMetrics().registry).decode()
    assert "staticfleet_build_info{" in text
    assert "process_cpu_seconds_total" in text
    # The operator's group label is `group`, like the coordinator's.
    metrics = OperatorMetrics()
    metrics.observe_group("ns", "orders", desired=1, ready=1, slots=1, phase="Idle")
    assert 'group="orders"' in generate_latest(metrics.registry).decode()
