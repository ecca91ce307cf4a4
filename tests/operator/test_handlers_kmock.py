"""The real Kopf operator against kmock's Kubernetes emulator, members in-process."""

from __future__ import annotations

from typing import Any

from coordinator.client import env as member_env
from staticfleet_operator.members import INSTANCE_ID_ANNOTATION, SLOT_ANNOTATION
from tests.operator.kube_harness import (
    CG_RESOURCE,
    Cluster,
    env_of,
    managed_spec,
    running_cluster,
)


async def test_create_group_creates_members_and_replaces_a_deleted_pod() -> None:
    async with running_cluster() as cluster:
        await cluster.create_group("orders", managed_spec(replicas=3))
        body = await cluster.eventually(
            lambda: cluster.group_settled("orders", 3), what="3 members Stable"
        )
        pods = sorted(await cluster.pods("orders"), key=lambda p: p["metadata"]["name"])
        slots = [p["metadata"]["annotations"][SLOT_ANNOTATION] for p in pods]
        ids = [p["metadata"]["annotations"][INSTANCE_ID_ANNOTATION] for p in pods]
        assert slots == ["0", "1", "2"]
        assert ids == ["orders-0", "orders-1", "orders-2"]
        assert [env_of(p)[member_env.INSTANCE_ID] for p in pods] == ids
        assert {env_of(p)[member_env.REBALANCE_PROTOCOL] for p in pods} == {"eager"}
        assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ConsumerGroup" for p in pods)
        status = body["status"]
        assert status["observedGeneration"] == 1
        assert status["groupState"] == "Stable"
        assert [m["instanceId"] for m in status["memberInstances"]] == ids
        assert {c["type"] for c in status["conditions"]} == {"Ready", "Progressing", "Degraded"}

        # A deleted pod comes back in its slot with its instance id (no LeaveGroup).
        since = max((e.seq for e in await cluster.journal("orders")), default=0)
        await cluster.kube.delete_pod("default", "orders-1")
        await cluster.eventually(
            lambda: _started_again(cluster, "orders-1"), what="orders-1 restarted"
        )
        pods = await cluster.eventually(
            lambda: _pods_named(cluster, "orders", {"orders-0", "orders-1", "orders-2"}),
            what="replacement pod",
        )
        replacement = next(p for p in pods if p["metadata"]["name"] == "orders-1")
        assert replacement["metadata"]["annotations"][INSTANCE_ID_ANNOTATION] == "orders-1"
        assert env_of(replacement)[member_env.INSTANCE_ID] == "orders-1"
        await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="Stable again")
        kinds = [e.kind for e in await cluster.journal("orders", since)]
        assert "member_left" not in kinds


async def _started_again(cluster: Cluster, name: str) -> bool:
    return sum(1 for e in cluster.kubelet.history if e.name == name) >= 2


async def _pods_named(cluster: Cluster, group: str, names: set[str]) -> list[dict[str, Any]] | None:
    pods = await cluster.pods(group)
    return pods if {p["metadata"]["name"] for p in pods} == names else None


async def test_protocol_change_walks_both_bounces_one_member_at_a_time_leader_last() -> None:
    async with running_cluster() as cluster:
        await cluster.create_group("orders", managed_spec(replicas=3))
        await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="3 Stable")
        started_before = len(cluster.kubelet.history)
        actions_before = len(cluster.actions())
        [described] = await cluster.coordinator.describe_groups(["orders"])
        leader = next(
            m.group_instance_id for m in described.members if m.member_id == described.leader
        )

        await cluster.update_spec("orders", {"rebalance": {"protocol": "cooperative"}})

        async def completed() -> dict[str, Any] | None:
            body = await cluster.get_group("orders")
            status = body.get("status") or {}
            rollout = status.get("rollout") or {}
            if rollout.get("phase") == "Completed" and status.get("effectiveRebalanceProtocol") == (
                "cooperative"
            ):
                return body
            return None

        body = await cluster.eventually(completed, timeout=40, what="rollout completed")
        assert body["status"]["rollout"]["bounces"] == ["compatible", "cooperative"]
        restarts = cluster.kubelet.history[started_before:]
        assert [e.protocol for e in restarts] == ["compatible"] * 3 + ["cooperative"] * 3
        bounce1, bounce2 = restarts[:3], restarts[3:]
        assert sorted(e.instance_id for e in bounce1) == ["orders-0", "orders-1", "orders-2"]
        assert sorted(e.instance_id for e in bounce2) == ["orders-0", "orders-1", "orders-2"]
        assert bounce1[-1].instance_id == leader
        # One member at a time: every delete is followed by that pod's re-creation.
        steps = [
            (a.verb, a.name)
            for a in cluster.actions()[actions_before:]
            if a.verb in ("delete", "create")
        ]
        assert len(steps) == 12
        for index in range(0, 12, 2):
            assert steps[index][0] == "delete"
            assert steps[index + 1] == ("create", steps[index][1])
        # Progress was in status along the way.
        history = cluster.emulator.objects[CG_RESOURCE, "default", "orders"].history
        phases = [
            (dict(v).get("status") or {}).get("rollout", {}).get("phase")
            for v in history
            if v is not None
        ]
        assert "Bounce1" in phases and "Bounce2" in phases
        assert phases.index("Bounce1") < phases.index("Bounce2")
        group = {"namespace": "default", "group": "orders"}
        bounces = "staticfleet_operator_member_bounces_total"
        assert cluster.metric(bounces, **group, phase="Bounce1") == 3
        assert cluster.metric(bounces, **group, phase="Bounce2") == 3
        await cluster.eventually(
            lambda: (
                cluster.metric("staticfleet_operator_rollout_phase", **group, phase="Completed")
                == 1
            ),
            what="phase Completed in metrics",
        )
        assert cluster.metric("staticfleet_operator_rollout_paused", **group) == 0
        assert cluster.metric("staticfleet_operator_reconciles_total", result="error") == 0


async def test_delete_runs_the_finalizer_pods_then_one_leave_then_group_dropped() -> None:
    async with running_cluster() as cluster:
        await cluster.create_group("orders", managed_spec(replicas=2))
        await cluster.eventually(lambda: cluster.group_settled("orders", 2), what="2 Stable")
        since = max(e.seq for e in await cluster.journal("orders"))
        group = {"namespace": "default", "group": "orders"}
        members = "staticfleet_operator_group_members"
        await cluster.eventually(
            lambda: cluster.metric(members, **group, kind="ready") == 2, what="series present"
        )
        await cluster.delete_group("orders")

        async def gone() -> bool:
            return await cluster.kube.get_group("default", "orders") is None

        await cluster.eventually(gone, what="ConsumerGroup gone")
        assert await cluster.pods("orders") == []
        events = await cluster.journal("orders", since)
        left = [e for e in events if e.kind == "member_left"]
        assert sorted(e.group_instance_id or "" for e in left) == ["orders-0", "orders-1"]
        assert events[events.index(left[0]) + 1] is left[1]
        assert events[-1].kind == "group_deleted"
        [described] = await cluster.coordinator.describe_groups(["orders"])
        assert described.error_code.name == "GROUP_ID_NOT_FOUND"
        # The group's series went with it.
        registry = cluster.operator.metrics.registry
        assert [
            sample
            for family in registry.collect()
            for sample in family.samples
            if sample.labels.get("group") == "orders"
        ] == []


def executor(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {
                "staticfleet.dev/group": "spark",
                "spark-role": "executor",
                "spark-app-selector": "job-1",
            },
        },
        "spec": {"containers": [{"name": "executor", "image": "spark:3.5", "env": []}]},
    }


def adopted_spec() -> dict[str, Any]:
    return {
        "groupId": "spark-job",
        "topics": [{"name": "events", "partitions": 4}],
        "selector": {"matchLabels": {"spark-role": "executor", "spark-app-selector": "job-1"}},
        "membership": {"sessionTimeoutMs": 6000, "rebalanceTimeoutMs": 5000},
    }


async def test_adopted_pods_get_slots_from_the_webhook_and_a_replacement_reuses_one() -> None:
    async with running_cluster(webhook=True) as cluster:
        await cluster.create_group("spark", adopted_spec())
        await cluster.eventually(
            lambda: _status_field(cluster, "spark", "observedGeneration"), what="first pass"
        )
        for index in range(3):
            created = await cluster.admit_and_create(executor(f"exec-{index}"))
            annotations = created["metadata"]["annotations"]
            assert annotations[SLOT_ANNOTATION] == str(index)
            assert annotations[INSTANCE_ID_ANNOTATION] == f"spark-job-{index}"
            values = env_of(created)
            assert values[member_env.INSTANCE_ID] == f"spark-job-{index}"
            assert values[member_env.GROUP_ID] == "spark-job"
            assert values[member_env.REBALANCE_PROTOCOL] == "eager"
        await cluster.eventually(lambda: cluster.group_settled("spark", 3), what="3 executors")

        # Executor 1 dies; once the operator has seen it go, its replacement takes slot 1.
        await cluster.kube.delete_pod("default", "exec-1")

        async def noticed() -> bool:
            instances = await _status_field(cluster, "spark", "memberInstances")
            return instances is not None and len(instances) == 2

        await cluster.eventually(noticed, what="the operator noticed exec-1 gone")
        replacement = await cluster.admit_and_create(executor("exec-3"))
        assert replacement["metadata"]["annotations"][INSTANCE_ID_ANNOTATION] == "spark-job-1"
        assert env_of(replacement)[member_env.INSTANCE_ID] == "spark-job-1"
        # A pod of no known group is left alone.
        stranger = executor("exec-x")
        stranger["metadata"]["labels"]["staticfleet.dev/group"] = "nobody"
        created = await cluster.admit_and_create(stranger)
        assert "staticfleet.dev/slot" not in (created["metadata"].get("annotations") or {})
        admissions = "staticfleet_operator_webhook_admissions_total"
        assert cluster.metric(admissions, result="stamped") == 4
        assert cluster.metric(admissions, result="skipped") == 1
        assert cluster.metric(admissions, result="rejected") == 0
        spark = {"namespace": "default", "group": "spark"}
        assert cluster.metric("staticfleet_operator_slot_allocations_total", **spark) == 4
        await cluster.eventually(lambda: cluster.group_settled("spark", 3), what="3 again")


async def _status_field(cluster: Cluster, name: str, key: str) -> Any:
    body = await cluster.kube.get_group("default", name)
    return ((body or {}).get("status") or {}).get(key)


def test_operator_run_cli_takes_the_charts_flags() -> None:
    from staticfleet.cli import build_parser
    from staticfleet.commands.operator_cmd import options_from_args

    args = build_parser().parse_args(
        [
            "operator",
            "run",
            "--namespace",
            "team-a",
            "--namespace=team-b,team-c",
            "--store=sqlite:///data/coordinator.db",
            "--coordinator-host=0.0.0.0",
            "--coordinator-port=9092",
            "--coordinator-url=http://sf-coordinator.ops.svc:9092",
            "--webhook-port=9443",
            "--webhook-cert=/certs/tls.crt",
            "--webhook-key=/certs/tls.key",
            "--peering=ops-sf",
            "--health-port=8080",
        ]
    )
    options = options_from_args(args)
    assert options.namespaces == ("team-a", "team-b", "team-c")
    assert options.coordinator_url == "http://sf-coordinator.ops.svc:9092"
    assert options.webhook_port == 9443 and str(options.webhook_key) == "/certs/tls.key"
    assert options.peering == "ops-sf" and options.health_port == 8080
    # The coordinator server's garbage-collection policy, under the same flag name.
    from coordinator.server.gc_policy import DEFAULT_FREEZE_INTERVAL_S

    assert options.gc_freeze_interval == DEFAULT_FREEZE_INTERVAL_S
    never = build_parser().parse_args(["operator", "run", "--gc-freeze-interval", "0"])
    assert options_from_args(never).gc_freeze_interval == 0

    from staticfleet_operator.app import kopf_settings

    settings = kopf_settings(options)
    assert settings.peering.name == "ops-sf" and settings.peering.mandatory
    assert settings.admission.server is not None and settings.admission.managed is None


async def test_operator_process_serves_coordinator_health_and_reconciles() -> None:
    import asyncio
    import base64
    import gc

    import aiohttp
    import kmock
    import kopf
    from prometheus_client.parser import text_string_to_metric_families

    from coordinator.server import AuthConfig
    from staticfleet.kafka.broker import free_port
    from staticfleet_operator.app import OperatorOptions, run_operator
    from tests.operator.kube_harness import NAMESPACE, declare_resources

    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        declare_resources(emulator)
        url = str(server.url).rstrip("/")
        coordinator_port, health_port = free_port(), free_port()
        options = OperatorOptions(
            namespaces=(NAMESPACE,),
            store="memory://",
            coordinator_host="127.0.0.1",
            coordinator_port=coordinator_port,
            coordinator_url="http://members-see-this:9092",
            health_port=health_port,
            interval=0.1,
        )
        settings = kopf.OperatorSettings()
        settings.scanning.disabled = True
        settings.posting.enabled = False
        stop, ready = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(
            run_operator(
                options,
                AuthConfig(admin_tokens=frozenset({"admin-token-123456"})),
                stop_flag=stop,
                ready_flag=ready,
                credentials=kopf.ConnectionInfo(server=url, default_namespace=NAMESPACE),
                settings=settings,
            )
        )
        try:
            await asyncio.wait_for(ready.wait(), 10)
            from tests.operator.kube_harness import consumer_group

            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{coordinator_port}/healthz") as r:
                    assert r.status == 200
                for _ in range(100):
                    try:
                        async with session.get(f"http://127.0.0.1:{health_port}/healthz") as r:
                            if r.status == 200:
                                break
                    except aiohttp.ClientError:
                        pass
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError("no /healthz")
                created = consumer_group("orders", managed_spec(replicas=1))
                path = f"/apis/staticfleet.dev/v1alpha1/namespaces/{NAMESPACE}/consumergroups"
                async with session.post(url + path, json=created) as r:
                    assert r.status < 300
                for _ in range(100):
                    async with session.get(f"{url}/api/v1/namespaces/{NAMESPACE}/pods") as r:
                        pods = (await r.json())["items"]
                    if pods:
                        break
                    await asyncio.sleep(0.05)
                # The group's member token (operator-made Secret) is registered with the
                # embedded server: it may act on its group, a wrong one may not.
                secret_path = f"/api/v1/namespaces/{NAMESPACE}/secrets/orders-member-token"
                async with session.get(url + secret_path) as r:
                    encoded = (await r.json())["data"]["token"]
                token = base64.b64decode(encoded).decode()
                beat = f"http://127.0.0.1:{coordinator_port}/v1/groups/orders/heartbeat"
                body = {"group_id": "orders", "generation_id": 1, "member_id": "nobody"}
                for bearer, expected in ((token, 200), ("a-wrong-token", 403)):
                    headers = {"Authorization": f"Bearer {bearer}"}
                    async with session.post(beat, json=body, headers=headers) as r:
                        assert r.status == expected, await r.text()
                # One scrape target: the coordinator's /metrics carries the operator's series
                # (the pass that created the pod ends after it: its status and metrics follow).
                passed = ("staticfleet_operator_reconciles_total", (("result", "ok"),))
                for _ in range(100):
                    async with session.get(f"http://127.0.0.1:{coordinator_port}/metrics") as r:
                        assert r.status == 200
                        samples = {
                            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
                            for family in text_string_to_metric_families(await r.text())
                            for sample in family.samples
                        }
                    if samples.get(passed, 0) >= 1:
                        break
                    await asyncio.sleep(0.05)
                assert samples[passed] >= 1
                desired = (("group", "orders"), ("kind", "desired"), ("namespace", NAMESPACE))
                assert samples[("staticfleet_operator_group_members", desired)] == 1
                assert ("staticfleet_join_latency_seconds_count", ()) in samples  # the server's
            assert env_of(pods[0])[member_env.COORDINATOR_URL] == "http://members-see-this:9092"
            # The garbage-collection policy of `coordinator serve` runs here too.
            assert gc.get_freeze_count() > 0
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
            gc.unfreeze()  # this is a test process: give the rest of the suite its collector


def test_rollout_state_survives_the_trip_through_status() -> None:
    from datetime import UTC, datetime

    from coordinator.client.config import RebalanceProtocolSetting as P
    from staticfleet_operator.crd import ConsumerGroupStatus, FleetProtocol
    from staticfleet_operator.rollout import RolloutPhase, RolloutStatus

    now = datetime(2026, 1, 1, tzinfo=UTC)
    state = RolloutStatus(
        phase=RolloutPhase.BOUNCE2,
        from_protocol=P.EAGER,
        to_protocol=FleetProtocol.COOPERATIVE,
        template_hash="abc",
        bounces=(P.COMPATIBLE, P.COOPERATIVE),
        bounce_index=1,
        bounced_slots=(0,),
        pending_slots=(2, 1),
        current_slot=0,
        current_pod="orders-0",
        current_member_id="m-1",
        current_pod_uid="key-0",
        current_slot_bounced_at=now,
        started_at=now,
        waiting_since=now,
        message="bouncing",
    )
    assert state.progress == "0/3" and state.target_protocol is P.COOPERATIVE
    wire = ConsumerGroupStatus(rollout=state).to_patch()
    assert wire["rollout"]["phase"] == "Bounce2" and wire["rollout"]["pausedPhase"] is None
    assert ConsumerGroupStatus.model_validate(wire).rollout == state
    paused = state.model_copy(update={"phase": RolloutPhase.PAUSED})
    assert paused.paused_phase is RolloutPhase.BOUNCE2


def test_an_unreadable_rollout_reads_as_fresh_and_keeps_the_rest_of_status() -> None:
    from staticfleet_operator.crd import ConsumerGroupStatus, RolloutStatus

    status = ConsumerGroupStatus.model_validate(
        {"members": 3, "rollout": {"phase": "Bounce1", "bounces": [], "bounceIndex": 0}}
    )
    assert status.members == 3 and status.rollout == RolloutStatus()


async def test_a_restarted_operator_resumes_the_rollout_without_repeating_a_member() -> None:
    async with running_cluster() as cluster:
        await cluster.create_group("orders", managed_spec(replicas=3))
        await cluster.eventually(lambda: cluster.group_settled("orders", 3), what="3 Stable")
        started_before = len(cluster.kubelet.history)
        await cluster.update_spec("orders", {"rebalance": {"protocol": "cooperative"}})

        async def two_compatible_members() -> bool:
            restarts = cluster.kubelet.history[started_before:]
            return sum(1 for e in restarts if e.protocol == "compatible") >= 2

        await cluster.eventually(two_compatible_members, what="bounce 1 half done")
        cluster.forget_operator_memory()

        async def completed() -> bool:
            body = await cluster.get_group("orders")
            status = body.get("status") or {}
            return (status.get("rollout") or {}).get("phase") == "Completed" and status.get(
                "effectiveRebalanceProtocol"
            ) == "cooperative"

        await cluster.eventually(completed, timeout=40, what="rollout completed after restart")
        restarts = cluster.kubelet.history[started_before:]
        assert [e.protocol for e in restarts] == ["compatible"] * 3 + ["cooperative"] * 3
        assert len({e.instance_id for e in restarts[:3]}) == 3
        assert len({e.instance_id for e in restarts[3:]}) == 3


def test_member_env_replaces_the_templates_own_values_for_operator_owned_names() -> None:
    from staticfleet_operator.crd import parse_spec
    from staticfleet_operator.members import MemberSettings, managed_pod, member_pod
    from staticfleet_operator.rollout import MemberPod

    raw = managed_spec(replicas=1)
    raw["template"]["spec"]["containers"][0]["env"] = [
        {"name": "STATICFLEET_INSTANCE_ID", "value": "hand-written"},
        {"name": "APP_SETTING", "value": "kept"},
    ]
    spec = parse_spec(raw)
    pod = managed_pod(
        spec,
        MemberSettings("http://c:9092", "orders"),
        namespace="default",
        owner_uid="u-1",
        slot=4,
        protocol=member_env_protocol("compatible"),
        pod_key="k-4",
    )
    values = env_of(pod)
    assert values["APP_SETTING"] == "kept"
    assert values[member_env.INSTANCE_ID] == "orders-4"
    assert [e["name"] for e in pod["spec"]["containers"][0]["env"]].count(
        member_env.INSTANCE_ID
    ) == 1
    assert pod["metadata"]["name"] == "orders-4"
    read = member_pod(pod)
    assert isinstance(read, MemberPod)
    assert (read.slot, read.instance_id, read.pod_uid, read.ready) == (4, "orders-4", "k-4", False)


def member_env_protocol(value: str) -> Any:
    from coordinator.client.config import RebalanceProtocolSetting

    return RebalanceProtocolSetting(value)


async def test_a_managed_group_gets_its_members_disruption_budget_and_scale_status() -> None:
    async with running_cluster() as cluster:
        await cluster.create_group("orders", managed_spec(replicas=2))
        body = await cluster.eventually(
            lambda: cluster.group_settled("orders", 2), what="2 members Stable"
        )
        assert body["status"]["replicas"] == 2
        assert body["status"]["selector"] == (
            "app.kubernetes.io/managed-by=staticfleet,staticfleet.dev/group=orders,"
            "staticfleet.dev/slot"
        )
        budget = await cluster.kube.get_pod_disruption_budget("default", "orders-members")
        assert budget is not None
        [owner] = budget["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("ConsumerGroup", "orders")
        assert owner["uid"] == body["metadata"]["uid"] and owner["controller"] is True
        assert budget["spec"]["maxUnavailable"] == 1

        # A changed maxUnavailable is patched onto the same budget.
        await cluster.update_spec("orders", {"disruption": {"maxUnavailable": "50%"}})

        async def patched() -> dict[str, Any] | None:
            found = await cluster.kube.get_pod_disruption_budget("default", "orders-members")
            return found if found and found["spec"]["maxUnavailable"] == "50%" else None

        await cluster.eventually(patched, what="maxUnavailable 50%")
