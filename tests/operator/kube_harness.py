"""Run the real Kopf operator against kmock's Kubernetes emulator, with a fake kubelet.

kmock runs no containers, so `Kubelet` plays the node: for every member pod it starts an
in-process `GroupMember` configured from the pod's env (over the operator's own embedded
coordinator) and marks the pod Running/Ready through the status subresource; when a pod is
deleted, its member stops (a static member sends no LeaveGroup, as a killed pod would not).
It also plays the API server's bookkeeping kmock leaves out: `metadata.generation` bumps on
spec changes, and uid/creationTimestamp on creation.

What the operator wrote, in order, is read from the emulator's own record of the requests it
received (`Cluster.actions`): the operator keeps no log of its own.

Like a real kubelet it resolves `valueFrom.secretKeyRef` env from the pod's namespace (a
missing Secret or key: the container does not start, and the next pass tries again). With
`running_cluster(http_members=True)` the embedded coordinator also serves HTTP (admin token
only, as in the operator process; the operator registers member tokens with it) and the
members join over HTTP with the `STATICFLEET_TOKEN` their pod env resolves to.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import jsonpatch
import kmock
import kopf
from kopf._cogs.structs.credentials import Vault

from coordinator import CoordinatorConfig, GroupCoordinator, JournalEvent, MemoryStore, SystemClock
from coordinator.client import (
    GroupMember,
    HttpTransport,
    InProcessTransport,
    MemberConfig,
    MemberState,
    RebalanceListener,
)
from coordinator.client import env as member_env
from coordinator.client.config import RebalanceProtocolSetting
from coordinator.client.consumer_protocol_member import ConsumerProtocolMember
from coordinator.client.consumer_protocol_state import InstanceIdWait
from coordinator.client.kafka_transport import KafkaTransport
from coordinator.client.listener import NoopRebalanceListener
from coordinator.client.standby import wait_for_promotion
from coordinator.client.transport import TransportError
from coordinator.server import (
    AuthConfig,
    RunningServer,
    authenticator_of,
    create_app,
    serve_group_lag,
    start_server,
)
from e2e.kube_api import admission_review
from staticfleet.kafka.broker import (
    free_port,  # below the ephemeral range: not reused by the kernel meanwhile
)
from staticfleet.kafka.java_peer import JavaPeer
from staticfleet_operator import handlers
from staticfleet_operator.crd import API_VERSION, GROUP, KIND, PLURAL, VERSION
from staticfleet_operator.kafka_journal import RebalanceJournal
from staticfleet_operator.kube import CORE, GROUPS, MERGE_PATCH, USER_AGENT, KubeApi, path
from staticfleet_operator.members import POD_KEY_ANNOTATION
from staticfleet_operator.owned import GROUP_LABEL
from staticfleet_operator.reconcile import Operator
from staticfleet_operator.webhook import WEBHOOK_PATH

NAMESPACE = "default"
ADMIN_TOKEN = "harness-admin-token"
KUBELET_FINALIZER = "tests.staticfleet.dev/kubelet"
CG_RESOURCE = f"{GROUP}/{VERSION}/{PLURAL}"
log = logging.getLogger("tests.kube_harness")


def declare_resources(emulator: kmock.KubernetesEmulator) -> None:
    emulator.resources[CG_RESOURCE] = kmock.ResourceInfo(
        kind=KIND,
        singular="consumergroup",
        namespaced=True,
        verbs={"list", "watch", "get", "patch", "create", "delete", "update"},
        subresources={"status"},
    )
    emulator.resources["v1/pods"] = kmock.ResourceInfo(
        kind="Pod",
        singular="pod",
        namespaced=True,
        verbs={"list", "watch", "get", "patch", "create", "delete"},
        subresources={"status"},
    )
    emulator.resources["v1/secrets"] = kmock.ResourceInfo(
        kind="Secret",
        singular="secret",
        namespaced=True,
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    )
    # Each managed group's PodDisruptionBudget (read until known as wanted, created once).
    emulator.resources["policy/v1/poddisruptionbudgets"] = kmock.ResourceInfo(
        kind="PodDisruptionBudget",
        singular="poddisruptionbudget",
        namespaced=True,
        verbs={"list", "watch", "get", "patch", "create", "delete"},
    )
    emulator.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", singular="namespace", namespaced=False, verbs={"list", "watch", "get"}
    )
    emulator.resources["v1/events"] = kmock.ResourceInfo(
        kind="Event", singular="event", namespaced=True, verbs={"create", "list"}
    )


def consumer_group(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": str(uuid.uuid4()),
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": dict(spec),
    }


def managed_spec(group_id: str = "orders", replicas: int = 3, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "groupId": group_id,
        "topics": [{"name": "orders", "partitions": 6}],
        "replicas": replicas,
        "template": {"spec": {"containers": [{"name": "member", "image": "staticfleet:dev"}]}},
        "membership": {"sessionTimeoutMs": 6000, "rebalanceTimeoutMs": 5000},
        "rollout": {"memberReadyTimeoutSeconds": 30},
        # Scale-downs at once: the tests of other behaviour would otherwise wait out the
        # default stabilization window (test_scale_step_kmock.py tests the window).
        "scaleDown": {"stabilizationWindowSeconds": 0},
    }
    spec.update(extra)
    return spec


def env_of(pod: Mapping[str, Any]) -> dict[str, str]:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return {e["name"]: e.get("value", "") for e in containers[0].get("env") or []}


async def resolve_env(kube: KubeApi, pod: Mapping[str, Any]) -> dict[str, str] | None:
    """The first container's env as a kubelet resolves it: literal values, and
    `valueFrom.secretKeyRef` read from the pod's namespace. None when a referenced Secret or
    key is missing (a real kubelet refuses to start the container: CreateContainerConfigError).
    """
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    namespace = (pod.get("metadata") or {}).get("namespace") or NAMESPACE
    values: dict[str, str] = {}
    for entry in containers[0].get("env") or []:
        ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
        if ref is None:
            values[entry["name"]] = entry.get("value", "")
            continue
        secret = await kube.get_secret(namespace, ref["name"])
        if secret is None and not ref.get("optional"):
            return None
        if secret is None:
            continue
        raw = (secret.get("data") or {}).get(ref["key"])
        if raw is None:
            if ref.get("optional"):
                continue
            return None
        values[entry["name"]] = base64.b64decode(raw).decode()
    return values


@dataclass
class PodEvent:
    verb: str  # started | stopped
    name: str
    instance_id: str
    protocol: str


# The operator's default env names for stock Kafka clients (spec.coordinator.env).
STOCK_INSTANCE_ID = "KAFKA_GROUP_INSTANCE_ID"
STOCK_GROUP_ID = "KAFKA_GROUP_ID"
STOCK_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
STOCK_STRATEGY = "KAFKA_PARTITION_ASSIGNMENT_STRATEGY"
STOCK_TOPICS = "KAFKA_TOPICS"


class Closable(Protocol):
    async def close(self) -> None: ...


@dataclass
class JavaPod:
    """A Java consumer process in the role of a pod's container."""

    peer: JavaPeer
    state: MemberState = MemberState.STABLE  # never FATAL: the kubelet does not restart it

    async def close(self, leave: bool = False) -> None:
        # SIGTERM: the consumer closes; a static member sends no LeaveGroup.
        await asyncio.to_thread(self.peer.stop)


class Severable:
    """A transport that can be cut: every request then fails, as a process killed with
    SIGKILL sends nothing more (no revocation commit, no closing heartbeat)."""

    def __init__(self, inner: KafkaTransport) -> None:
        self.inner = inner
        self.cut = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name == "close" or not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.cut:
                raise TransportError("the process was killed")
            return await attr(*args, **kwargs)

        return call


@dataclass
class ConsumerPod:
    """Our member on Kafka's consumer protocol (KIP-848) in the role of a pod's container,
    waiting on a held instance id when its env says so (STATICFLEET_STANDBY_WAIT_MS)."""

    member: ConsumerProtocolMember
    transport: Severable

    @property
    def state(self) -> MemberState:
        return MemberState.FATAL if self.member.error is not None else MemberState.STABLE

    async def close(self, leave: bool = False) -> None:
        await self.member.close(leave=leave)

    def kill(self) -> None:
        self.transport.cut = True


@dataclass
class StandbyContainer:
    """A hot standby pod's container: heartbeats as a standby until promoted, then runs as
    the member it was promoted into (what `staticfleet member run --standby-id` does)."""

    transport: HttpTransport | InProcessTransport
    group_id: str
    standby_id: str
    config: MemberConfig  # group_instance_id is set from the promotion
    listener: RebalanceListener | None
    member: GroupMember | None = None
    promoted_at: float | None = None  # monotonic
    task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        promoted = await wait_for_promotion(
            self.transport,
            self.group_id,
            self.standby_id,
            session_timeout_ms=self.config.session_timeout_ms,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
        )
        self.promoted_at = time.monotonic()
        config = dataclasses.replace(self.config, group_instance_id=promoted.instance_id)
        member = GroupMember(self.transport, config, self.listener)
        self.member = member
        await member.start(promoted=promoted)

    @property
    def state(self) -> MemberState:
        return self.member.state if self.member is not None else MemberState.UNJOINED

    async def close(self, leave: bool = False) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        if self.member is not None:
            await self.member.close(leave=leave)


@dataclass
class Kubelet:
    kube: KubeApi
    coordinator: GroupCoordinator
    members: dict[str, GroupMember | JavaPod | StandbyContainer | ConsumerPod] = field(
        default_factory=dict
    )
    history: list[PodEvent] = field(default_factory=list)
    # Set: members join over HTTP at this URL with their pod's STATICFLEET_TOKEN.
    server_url: str | None = None
    transports: dict[str, Closable] = field(default_factory=dict)
    # Where Java pods write their consumer event logs (None: no Java pods expected).
    java_logs: Path | None = None
    # Pod names whose env could not be resolved yet (a Secret or key missing).
    waiting: set[str] = field(default_factory=set)
    crashes: list[str] = field(default_factory=list)  # pod names whose member failed
    # Pod names whose container never starts (an image that cannot be pulled): the pod stays
    # Pending and not Ready until the name is taken out again.
    refused: set[str] = field(default_factory=set)
    # Set: each member gets the listener this makes from its pod name (ownership checks).
    listener_for: Callable[[str], RebalanceListener] | None = None
    # Pod keys whose container exited for good (`exit`): never started again.
    exited: set[str] = field(default_factory=set)

    async def run(self) -> None:
        while True:
            try:
                await self.sync()
            except Exception:  # a test's kubelet keeps going, as a real one does
                log.exception("kubelet pass failed")
            await asyncio.sleep(0.05)

    async def sync(self) -> None:
        pods = [
            pod
            for pod in await self.kube.list_pods(NAMESPACE, {})
            if GROUP_LABEL in ((pod.get("metadata") or {}).get("labels") or {})
        ]
        seen: set[str] = set()
        for pod in pods:
            key = (pod["metadata"].get("annotations") or {}).get(POD_KEY_ANNOTATION)
            if not key:
                continue
            seen.add(key)
            if pod["metadata"].get("deletionTimestamp"):
                # Graceful termination: the container stops, then the pod object goes.
                await self._stop(key)
                await self._release(pod["metadata"]["name"])
            elif key in self.exited or (pod.get("status") or {}).get("phase") in (
                "Succeeded",
                "Failed",
            ):
                await self._stop(key)  # a finished pod never runs again (`exit`)
            elif key not in self.members:
                if pod["metadata"]["name"] in self.refused:
                    self.waiting.add(pod["metadata"]["name"])
                    continue
                await self._start(key, pod)
            elif self.members[key].state is MemberState.FATAL:
                # The process exited (e.g. its token was refused: registered a moment after
                # the Secret appeared); a kubelet restarts the container.
                self.crashes.append(pod["metadata"]["name"])
                await self._stop(key)
                await self._start(key, pod)
        for key in list(self.members):
            if key not in seen:
                await self._stop(key)

    async def exit(self, name: str, code: int = 1, killed: bool = False) -> None:
        """The pod's container exits for good (restartPolicy Never, as Spark makes its
        executors, which exit when their driver disappears): the member stops without a
        LeaveGroup, and the pod stays, in phase Succeeded (code 0) or Failed. `killed`: a
        consumer-protocol member sends nothing more at all (SIGKILL: no epoch -2)."""
        pods = await self.kube.list_pods(NAMESPACE, {})
        [pod] = [p for p in pods if p["metadata"]["name"] == name]
        key = pod["metadata"]["annotations"][POD_KEY_ANNOTATION]
        self.exited.add(key)  # before anything: a `sync` under way must not restart it
        member = self.members.get(key)
        if killed:
            assert isinstance(member, ConsumerPod), "only a consumer-protocol pod is killed"
            member.kill()
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
        finished = {
            "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {"name": "executor", "ready": False, "state": {"terminated": terminated}}
            ],
        }
        await self._stop(key)
        await self.kube.patch_pod_status(NAMESPACE, name, finished)

    async def _stop(self, key: str) -> None:
        member = self.members.pop(key, None)
        if member is not None:
            await member.close(leave=False)
        transport = self.transports.pop(key, None)
        if transport is not None:
            await transport.close()

    async def _release(self, name: str) -> None:
        await self.kube.patch_pod(NAMESPACE, name, {"metadata": {"finalizers": None}})

    async def _start(self, key: str, pod: Mapping[str, Any]) -> None:
        resolved = await resolve_env(self.kube, pod)
        if resolved is None:
            self.waiting.add(pod["metadata"]["name"])
            return
        self.waiting.discard(pod["metadata"]["name"])
        values = resolved
        if STOCK_INSTANCE_ID in values:
            await self._start_stock_client(key, pod, values)
            return
        config = MemberConfig(
            group_id=values[member_env.GROUP_ID],
            topics=member_env.split_topics(values[member_env.TOPICS]),
            group_instance_id=values.get(member_env.INSTANCE_ID) or None,
            session_timeout_ms=int(values[member_env.SESSION_TIMEOUT_MS]),
            rebalance_timeout_ms=int(values[member_env.REBALANCE_TIMEOUT_MS]),
            heartbeat_interval_ms=100,
            rebalance_protocol=values[member_env.REBALANCE_PROTOCOL],  # type: ignore[arg-type]
            eager_assignor=values[member_env.EAGER_ASSIGNOR],
            cooperative_assignor=values[member_env.COOPERATIVE_ASSIGNOR],
            client_id=pod["metadata"]["name"],
        )
        listener = self.listener_for(pod["metadata"]["name"]) if self.listener_for else None
        url = values.get(member_env.COORDINATOR_URL, "")
        if values.get(member_env.STANDBY_ID):
            standby_transport: HttpTransport | InProcessTransport
            if self.server_url is not None:
                standby_transport = HttpTransport(
                    self.server_url, token=values.get(member_env.TOKEN)
                )
                self.transports[key] = standby_transport
            else:
                standby_transport = InProcessTransport(self.coordinator)
            container = StandbyContainer(
                standby_transport,
                config.group_id,
                values[member_env.STANDBY_ID],
                config,
                listener,
            )
            await self._hold(pod)
            container.start()
            self.members[key] = container
            self.history.append(
                PodEvent(
                    "started",
                    pod["metadata"]["name"],
                    "",
                    values[member_env.REBALANCE_PROTOCOL],
                )
            )
            await self._ready(pod)
            return
        if url.startswith("kafka://") and values[member_env.REBALANCE_PROTOCOL] == "consumer":
            await self._start_consumer(key, pod, values, config, listener)
            return
        if url.startswith("kafka://"):
            kafka = KafkaTransport(url)
            self.transports[key] = kafka
            member = GroupMember(kafka, config, listener)
        elif self.server_url is not None:
            transport = HttpTransport(self.server_url, token=values.get(member_env.TOKEN))
            self.transports[key] = transport
            member = GroupMember(transport, config, listener)
        else:
            member = GroupMember(InProcessTransport(self.coordinator), config, listener)
        await self._hold(pod)
        await member.start()
        self.members[key] = member
        self.history.append(
            PodEvent(
                "started",
                pod["metadata"]["name"],
                values.get(member_env.INSTANCE_ID, ""),
                values[member_env.REBALANCE_PROTOCOL],
            )
        )
        await self._ready(pod)

    async def _start_consumer(
        self,
        key: str,
        pod: Mapping[str, Any],
        values: Mapping[str, str],
        config: MemberConfig,
        listener: RebalanceListener | None,
    ) -> None:
        """`member run --group-protocol consumer`, with `--standby-wait-ms` from the env."""
        # The client id as `member run` sends it: the operator's STATICFLEET_CLIENT_ID, the pod.
        url = values[member_env.COORDINATOR_URL]
        severable = Severable(KafkaTransport(url, client_id=config.client_id))
        self.transports[key] = severable.inner
        wait_ms = int(values.get(member_env.STANDBY_WAIT_MS) or 0)
        member = ConsumerProtocolMember(
            severable,  # a KafkaTransport, its methods proxied
            config,
            listener or NoopRebalanceListener(),
            remote_assignor=values.get(member_env.REMOTE_ASSIGNOR) or None,
            standby=InstanceIdWait(limit_ms=wait_ms) if wait_ms else None,
        )
        await self._hold(pod)
        await member.start()
        self.members[key] = ConsumerPod(member, severable)
        name = pod["metadata"]["name"]
        instance_id = values.get(member_env.INSTANCE_ID, "")
        self.history.append(PodEvent("started", name, instance_id, "consumer"))
        await self._ready(pod)

    async def _hold(self, pod: Mapping[str, Any]) -> None:
        """Hold the pod object until its "container" has stopped, as a real kubelet does."""
        await self.kube.patch_pod(
            NAMESPACE, pod["metadata"]["name"], {"metadata": {"finalizers": [KUBELET_FINALIZER]}}
        )

    async def _ready(self, pod: Mapping[str, Any]) -> None:
        ready = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        await self.kube.patch_pod_status(NAMESPACE, pod["metadata"]["name"], ready)

    async def _start_stock_client(
        self, key: str, pod: Mapping[str, Any], values: Mapping[str, str]
    ) -> None:
        """A pod of a stock Kafka client, configured by the operator's KAFKA_* env: a Java
        strategy (class names) runs the Java KafkaConsumer peer as a process; any other
        family is played by our member with that single assignor (librdkafka and
        kafka-python offer one protocol: eager or cooperative, never both)."""
        name = pod["metadata"]["name"]
        # A pod the operator put on the consumer protocol has no strategy (the broker
        # assigns): only the Java peer plays such a pod here.
        consumer = values.get("KAFKA_GROUP_PROTOCOL") == "consumer"
        strategy = values.get(STOCK_STRATEGY, "")
        instance_id = values[STOCK_INSTANCE_ID]
        await self._hold(pod)
        if "org.apache.kafka" in strategy or consumer:
            assert self.java_logs is not None, "running_cluster(java_logs=...) for Java pods"
            peer = JavaPeer(
                values[STOCK_BOOTSTRAP],
                values[STOCK_GROUP_ID],
                values[STOCK_TOPICS].split(","),
                self.java_logs / f"{name}-{len(self.history)}.jsonl",
                instance_id=instance_id,
                strategies=strategy.split(",") if strategy else ("range",),
                session_timeout_ms=10_000,
                heartbeat_interval_ms=500,
                # A template's KAFKA_GROUP_PROTOCOL=consumer: KIP-848's protocol (the
                # strategy is then the broker's business; the peer ignores it).
                group_protocol=values.get("KAFKA_GROUP_PROTOCOL", "classic"),
                remote_assignor=values.get("KAFKA_GROUP_REMOTE_ASSIGNOR") or None,
            )
            await asyncio.to_thread(peer.start)
            self.members[key] = JavaPod(peer)
            protocol = (
                "consumer"
                if consumer
                else "compatible"
                if "," in strategy
                else strategy.rsplit(".", 1)[-1]
            )
        else:
            [assignor] = strategy.split(",")
            cooperative = assignor.startswith("cooperative")
            config = MemberConfig(
                group_id=values[STOCK_GROUP_ID],
                topics=tuple(values[STOCK_TOPICS].split(",")),
                group_instance_id=instance_id,
                session_timeout_ms=10_000,
                rebalance_timeout_ms=5_000,
                heartbeat_interval_ms=100,
                rebalance_protocol=RebalanceProtocolSetting(
                    "cooperative" if cooperative else "eager"
                ),
                eager_assignor="range" if cooperative else assignor,
                cooperative_assignor=assignor if cooperative else "cooperative-sticky",
                client_id=name,
            )
            transport = KafkaTransport(values[STOCK_BOOTSTRAP])
            self.transports[key] = transport
            member = GroupMember(transport, config)
            await member.start()
            self.members[key] = member
            protocol = config.rebalance_protocol.value
        self.history.append(PodEvent("started", name, instance_id, protocol))
        await self._ready(pod)

    async def close(self) -> None:
        for member in self.members.values():
            with contextlib.suppress(Exception):
                await member.close(leave=False)
        self.members.clear()
        for transport in self.transports.values():
            with contextlib.suppress(Exception):
                await transport.close()
        self.transports.clear()


@dataclass(frozen=True, slots=True)
class Action:
    """A write the operator made, as the API server received it."""

    verb: str  # create | delete | patch | event
    kind: str
    name: str  # an Event's: its reason
    detail: Mapping[str, str] = field(default_factory=dict)


def action_of(request: kmock.Request) -> Action | None:
    """The operator's write a request to the emulator was (None: a read, or not a write
    `Action` names: status patches are read back from the objects instead)."""
    plural = request.resource.plural if request.resource is not None else None
    data = request.data if isinstance(request.data, Mapping) else {}
    metadata = data.get("metadata") or {}
    method = str(request.method.value).upper() if request.method is not None else ""
    if plural == "events" and method == "POST":
        message = str(data.get("message"))
        return Action("event", "Event", str(data.get("reason")), {"message": message})
    if plural == "pods" and method == "POST":
        annotations = metadata.get("annotations") or {}
        return Action("create", "Pod", str(metadata.get("name")), {**annotations})
    if plural == "pods" and method == "DELETE":
        return Action("delete", "Pod", str(request.name))
    if plural == "pods" and method == "PATCH" and not request.subresource:
        return Action("patch", "Pod", str(request.name))
    if plural == "secrets" and method == "POST":
        return Action("create", "Secret", str(metadata.get("name")))
    return None


def made_by(request: kmock.Request, user_agent: str) -> bool:
    headers = {key.lower(): value for key, value in request.headers.items()}
    return str(headers.get("user-agent", "")).startswith(user_agent)


def kopf_watch(request: kmock.Request) -> bool:
    """A watch Kopf opens (not the tests', the kubelet's or the operator's own client)."""
    return request.params.get("watch") == "true" and made_by(request, "kopf/")


# What an API server answers a watch whose resourceVersion it no longer holds: the watcher
# (Kopf, the operator's informer) lists again.
GONE = {
    "type": "ERROR",
    "object": {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "Expired",
        "message": "too old resource version",
        "code": 410,
    },
}


@dataclass
class Cluster:
    emulator: kmock.KubernetesEmulator
    kube: KubeApi  # the test's own client (its requests are not the operator's actions)
    operator: Operator
    coordinator: GroupCoordinator
    kubelet: Kubelet
    webhook_url: str = ""
    memo: kopf.Memo | None = None
    server: RunningServer | None = None  # the coordinator's HTTP server (http_members)
    vault: Vault | None = None  # Kopf's credentials, which the operator's client uses too

    def actions(self) -> list[Action]:
        """Every write the operator made so far, in the order the emulator received them."""
        found = (action_of(r) for r in list(self.emulator) if made_by(r, USER_AGENT))
        return [action for action in found if action is not None]

    async def events(self) -> list[dict[str, Any]]:
        body = await self.kube.list_objects(path(CORE, "events", NAMESPACE))
        return list(body.get("items") or [])

    async def secrets(self) -> list[dict[str, Any]]:
        body = await self.kube.list_objects(path(CORE, "secrets", NAMESPACE))
        return list(body.get("items") or [])

    def forget_operator_memory(self) -> Operator:
        """What an operator restart loses: everything the `Operator` holds in memory (slot
        tables, locks, admissions, its API client). Kopf keeps running; the handlers pick
        the fresh one up from the memo on their next call."""
        assert self.memo is not None
        assert self.vault is not None
        fresh = Operator(
            self.coordinator,
            KubeApi(self.vault),
            coordinator_url=self.operator.coordinator_url,
            authenticator=self.operator.authenticator,
        )
        # Kopf keeps running, and with it its indices: the writes they do not show yet
        # belong with them (a real restart relists, so its indices lag nothing).
        fresh.observed = self.operator.observed
        # The old process's passes end with it; the new one's Kopf relists every group, and
        # each listed group gets a pass.
        old = self.operator.passes
        if old is not None:
            old.stop()
            fresh.passes = handlers.start_passes(fresh, old.requeue_seconds)
            for key in list(fresh.observed.groups or {}):
                fresh.passes.request(*key)
        self.memo["operator"] = fresh
        self.retired.append(self.operator)
        self.operator = fresh
        return fresh

    retired: list[Operator] = field(default_factory=list)
    # The tokens Kopf's login handler handed out, in order (`running_cluster(tokens=True)`).
    tokens: list[str] = field(default_factory=list)

    # --- objects ---------------------------------------------------------------------------

    async def create_group(self, name: str, spec: Mapping[str, Any]) -> None:
        body = consumer_group(name, spec)
        await self.kube.call("POST", path(GROUPS, PLURAL, NAMESPACE), body=body)

    async def get_group(self, name: str) -> dict[str, Any]:
        body = await self.kube.get_group(NAMESPACE, name)
        assert body is not None
        return body

    async def update_spec(self, name: str, changes: Mapping[str, Any]) -> None:
        body = await self.get_group(name)
        generation = int(body["metadata"].get("generation", 1)) + 1
        patch = {"metadata": {"generation": generation}, "spec": dict(changes)}
        await self.kube.call(
            "PATCH", path(GROUPS, PLURAL, NAMESPACE, name), body=patch, content_type=MERGE_PATCH
        )

    async def delete_group(self, name: str) -> None:
        await self.kube.call("DELETE", path(GROUPS, PLURAL, NAMESPACE, name))

    async def admit_and_create(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """Play the API server's admission chain: send the pod to the operator's mutating
        webhook (an AdmissionReview, as the API server does), apply its JSONPatch, create."""
        review = admission_review(pod, NAMESPACE, "system:serviceaccount:spark:driver")
        async with aiohttp.ClientSession() as session:
            url = f"{self.webhook_url}{WEBHOOK_PATH}"
            async with session.post(url, json=review) as response:
                answer = await response.json()
        result = answer["response"]
        assert result["allowed"], result
        mutated = dict(pod)
        if result.get("patch"):
            operations = json.loads(base64.b64decode(result["patch"]))
            mutated = jsonpatch.apply_patch(dict(pod), operations)
        created = await self.kube.create_pod(NAMESPACE, mutated)
        return created

    async def pods(self, group: str) -> list[dict[str, Any]]:
        return await self.kube.list_pods(NAMESPACE, {GROUP_LABEL: group})

    async def replaced(self, group: str, victim: Mapping[str, Any]) -> bool:
        """A live pod of the victim's name, created after it (another pod key) is listed."""

        def key(pod: Mapping[str, Any]) -> str:
            return str(pod["metadata"]["annotations"][POD_KEY_ANNOTATION])

        return any(
            p["metadata"]["name"] == victim["metadata"]["name"]
            and key(p) != key(victim)
            and not p["metadata"].get("deletionTimestamp")
            for p in await self.pods(group)
        )

    async def journal(self, group_id: str, since: int = 0) -> list[JournalEvent]:
        return await self.coordinator.journal_rows(group_id, since)

    # --- waiting ---------------------------------------------------------------------------

    async def eventually(
        self,
        check: Callable[[], Any],
        timeout: float = 20.0,  # noqa: ASYNC109
        what: str = "condition",
    ) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            result = check()
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return result
            last = result
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what} (last: {last!r})")

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample of the operator's metrics (None: no such series)."""
        return self.operator.metrics.registry.get_sample_value(name, labels)

    def passes_done(self) -> float:
        return self.metric("staticfleet_operator_reconciles_total", result="ok") or 0.0

    async def passes(self, count: int, timeout: float = 20.0) -> None:  # noqa: ASYNC109
        """Ask for `count` more passes of every group, one after another, and wait until
        they have run: what the operator would have done by then, it has done. (A settled
        group gets no pass unasked: passes follow events, not a clock.)"""
        for done in range(count):
            target = self.passes_done() + 1
            runner = self.operator.passes
            if runner is not None:
                for key in list(self.operator.observed.groups or {}):
                    runner.request(*key)

            def ran(target: float = target) -> bool:
                return self.passes_done() >= target

            await self.eventually(ran, timeout, what=f"{count - done} more passes")

    async def group_settled(self, name: str, replicas: int) -> dict[str, Any] | None:
        body = await self.kube.get_group(NAMESPACE, name)
        if body is None:
            return None
        status = body.get("status") or {}
        ready = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)
        if ready and ready["status"] == "True" and status.get("members") == replicas:
            return body
        return None


@contextlib.asynccontextmanager
async def running_cluster(
    interval: float = 0.1,
    webhook: bool = False,
    http_members: bool = False,
    java_logs: Path | None = None,
    journal: Path | None = None,
    tokens: bool = False,
    secret_watch: bool = True,
    resync: float = handlers.DEFAULT_RESYNC_SECONDS,
    member_token_audience: str | None = None,
) -> AsyncIterator[Cluster]:
    """kmock + embedded coordinator + the real Kopf operator + the fake kubelet. With
    `http_members` the coordinator serves HTTP and members join over it with their token.
    With `tokens`, each login of Kopf's gets a new bearer token (`Cluster.tokens`), as a
    rotated service-account token file would give it. Without `secret_watch` the operator
    lists and watches no Secrets (`--no-secret-watch`); `member_token_audience` turns pod
    identity on for the passes (the server is not told: no TokenReview in kmock)."""
    async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
        declare_resources(emulator)
        url = str(server.url).rstrip("/")
        coordinator = GroupCoordinator(
            CoordinatorConfig(group_initial_rebalance_delay_ms=50), SystemClock(), MemoryStore()
        )
        await coordinator.start()
        # The operator's client uses Kopf's credentials (the login handler below); the test's
        # and the kubelet's have their own, and another User-Agent: not the operator's actions.
        vault = Vault()
        operator = Operator(coordinator, KubeApi(vault), coordinator_url="http://coordinator:9092")
        operator.member_token_audience = member_token_audience
        emulator_login = kopf.ConnectionInfo(server=url, default_namespace=NAMESPACE)
        test_kube = KubeApi.connect(emulator_login, user_agent="staticfleet-tests")
        kubelet = Kubelet(
            KubeApi.connect(emulator_login, user_agent="staticfleet-tests-kubelet"),
            coordinator,
            java_logs=java_logs,
        )
        if journal is not None:
            operator.journal = RebalanceJournal(journal)
        coordinator_server: RunningServer | None = None
        if http_members:
            app = create_app(
                coordinator,
                AuthConfig(admin_tokens=frozenset({ADMIN_TOKEN})),
                manage_coordinator=False,
            )
            coordinator_server = await start_server(app, "127.0.0.1", 0, shutdown_timeout=1.0)
            operator.authenticator = authenticator_of(app)
            serve_group_lag(app, operator.lag_figures.get)
            kubelet.server_url = coordinator_server.url

        # register() mends Kopf as in run_operator, whichever test ran first in this process.
        registry = kopf.OperatorRegistry()
        handlers.register(
            registry,
            interval=interval,
            resync=resync,
            webhook=webhook,
            namespaces=[NAMESPACE],
            secret_watch=secret_watch,
        )

        handed_out: list[str] = []

        # async: Kopf runs a sync handler in its thread pool, a hop the re-login need not take.
        @kopf.on.login(registry=registry)
        async def login(**_: Any) -> kopf.ConnectionInfo:
            if not tokens:
                return emulator_login
            handed_out.append(f"token-{len(handed_out) + 1}")
            return dataclasses.replace(emulator_login, token=handed_out[-1])

        settings = kopf.OperatorSettings()
        settings.posting.enabled = False
        settings.scanning.disabled = True
        webhook_url = ""
        if webhook:
            port = free_port()
            settings.admission.server = kopf.WebhookServer(
                addr="127.0.0.1", host="127.0.0.1", port=port, insecure=True
            )
            webhook_url = f"http://127.0.0.1:{port}"
        stop = asyncio.Event()
        ready = asyncio.Event()
        memo = kopf.Memo(operator=operator)
        task = asyncio.create_task(
            kopf.operator(
                registry=registry,
                settings=settings,
                standalone=True,
                namespaces=[NAMESPACE],
                memo=memo,
                vault=vault,
                stop_flag=stop,
                ready_flag=ready,
            )
        )
        kubelet_task = asyncio.create_task(kubelet.run())
        cluster = Cluster(
            emulator,
            test_kube,
            operator,
            coordinator,
            kubelet,
            webhook_url,
            memo,
            coordinator_server,
            vault,
            tokens=handed_out,
        )
        try:
            await asyncio.wait_for(ready.wait(), 10)
            yield cluster
        finally:
            # The operator's passes first (their API client is closed below), then the
            # kubelet: Kopf waits (5 s) for tasks born while it ran, then cancels them.
            for used in [operator, *cluster.retired, cluster.operator]:
                if used.passes is not None:
                    await used.passes.close()
            kubelet_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await kubelet_task
            await kubelet.close()
            await kubelet.kube.close()
            await test_kube.close()
            if coordinator_server is not None:
                await coordinator_server.stop()
            await coordinator.close()
            for used in [operator, *cluster.retired, cluster.operator]:
                await used.kafka.close()
            # Open keep-alive connections hold server-side tasks that Kopf would wait for.
            for used in [operator, *cluster.retired, cluster.operator]:
                await used.kube.close()
            stop.set()
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(task, 10)
            await cluster.operator.kube.close()


def deep(value: Any) -> Any:
    return copy.deepcopy(value)
