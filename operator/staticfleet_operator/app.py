"""The operator process: the embedded coordinator server and Kopf, on one event loop.

    coordinator (store) ─ coordinator.server (aiohttp, members + admin API)
            └────────── Operator (shared by the handlers through Kopf's memo)
    Kopf: the ConsumerGroup index and events, finalizer, mutating webhook, peering
    informers (the operator's own list/watch): member pods, Opaque Secrets

The coordinator is started before Kopf and closed after it, so no handler ever talks to a
closed coordinator; members keep their sessions across a Kopf restart of the operator.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import kopf
from kopf._cogs.structs.credentials import Vault

from coordinator import CoordinatorConfig, GroupCoordinator, SystemClock, open_store
from coordinator.client.kafka_settings import PLAINTEXT_SETTINGS, KafkaClientSettings
from coordinator.server import (
    AuthConfig,
    add_readiness_gate,
    authenticator_of,
    create_app,
    serve_group_lag,
    start_server,
)
from coordinator.server.allocator import fix_mmap_threshold
from coordinator.server.context import CONTEXT
from coordinator.server.gc_policy import (
    DEFAULT_FREEZE_INTERVAL_S,
    DEFAULT_FULL_INTERVAL_S,
    freeze_periodically,
)
from coordinator.server.limits import DEFAULT_MAX_BODY_BYTES
from coordinator.server.pod_identity import PodAuth, ReviewCache
from coordinator.server.tls import ReloadingTls, TlsFiles
from staticfleet_operator import handlers
from staticfleet_operator.coordinator_cert import ServingCertIssuer, renew_periodically
from staticfleet_operator.kafka_journal import RebalanceJournal
from staticfleet_operator.kube import KubeApi
from staticfleet_operator.metrics import OperatorMetrics
from staticfleet_operator.peering import PeeringGate, watch_peering
from staticfleet_operator.pod_bindings import PodBindings
from staticfleet_operator.readiness import expect_groups
from staticfleet_operator.reconcile import Operator, register_listed_tokens
from staticfleet_operator.token_review import token_reviewer

log = logging.getLogger("staticfleet.operator")


DEFAULT_STORE = "sqlite:///data/coordinator.db"


@dataclass(frozen=True, slots=True)
class OperatorOptions:
    namespaces: tuple[str, ...] = ()  # none: every namespace
    store: str = DEFAULT_STORE
    coordinator_host: str = "0.0.0.0"
    coordinator_port: int = 9092
    coordinator_url: str = "http://127.0.0.1:9092"  # what members are told
    # The embedded coordinator's serving certificate (a mounted Secret's tls.crt/tls.key),
    # reloaded when the files change; none: plain HTTP (docs/server.md, "TLS").
    coordinator_tls: TlsFiles | ServingCertIssuer | None = None
    webhook_port: int | None = None  # none: no mutating webhook (managed groups only)
    webhook_cert: Path | None = None
    webhook_key: Path | None = None
    webhook_host: str = "0.0.0.0"
    peering: str | None = None  # none: standalone (one replica only!)
    priority: int | None = None  # none: by start time (newest wins), see default_priority
    health_port: int | None = None
    interval: float = handlers.DEFAULT_INTERVAL_SECONDS  # next pass of an unsettled group
    resync: float = handlers.DEFAULT_RESYNC_SECONDS  # every group's safety-net pass
    # The coordinator server's request body limit (a group's requests may need more, and
    # get it: coordinator.server.limits.group_body_limit).
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    initial_rebalance_delay_ms: int = 3000
    # Kafka's group.min.session.timeout.ms: a member asking for less is refused.
    min_session_timeout_ms: int = 6000
    # Where rebalances of Kafka-coordinated groups, seen by describe, are journaled (JSON
    # lines per group id, the analytics' input); none: not recorded.
    kafka_journal_dir: Path | None = None
    # Per-partition lag series (metrics.py): unbounded with the partitions, so opt-in.
    partition_lag_metrics: bool = False
    # Set: members of embedded groups authenticate with their pod's projected ServiceAccount
    # token for this audience, each only as its pod's instance id (docs/server.md, "Members
    # known by their pod"); None: each group's token Secret.
    member_token_audience: str | None = None
    # Set: member pods whose template sets no health port get this one, and probes on it
    # (member_probes.py); None: only templates that set one.
    member_health_port: int | None = None
    # False: no Secret informer (no list/watch on Secrets); each pass GETs the Secrets it
    # reads, so a rotation is seen on the group's next pass, at the latest after `resync`.
    secret_watch: bool = True
    # The operator's own Kafka settings for groups without spec.coordinator.kafka.
    kafka_settings: KafkaClientSettings = PLAINTEXT_SETTINGS
    # As for `coordinator serve` (gc_policy.py): the operator holds every watched pod, group
    # and Secret (Kopf's index, its informers), and a full collection over them paused its one
    # event loop — webhook, passes and the embedded coordinator's heartbeats — for 0.3-1 s at
    # 1,000 groups. 0: never freeze. What Kopf handles dies in reference cycles, often after
    # being frozen: a full collection once the frozen objects grew by a quarter, at most every
    # `gc_full_interval` s, reclaims it.
    gc_freeze_interval: float = DEFAULT_FREEZE_INTERVAL_S
    gc_full_interval: float = DEFAULT_FULL_INTERVAL_S


def kopf_settings(options: OperatorOptions) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.posting.level = logging.WARNING  # our own Events say what happened; Kopf's: errors
    if options.webhook_port is not None:
        settings.admission.server = kopf.WebhookServer(
            addr=options.webhook_host,
            port=options.webhook_port,
            certfile=str(options.webhook_cert) if options.webhook_cert else None,
            pkeyfile=str(options.webhook_key) if options.webhook_key else None,
            # Without a certificate (local runs) Kopf would generate a self-signed one; the
            # chart always mounts one.
        )
        settings.admission.managed = None  # the Helm chart owns the webhook configuration
    if options.peering:
        settings.peering.name = options.peering
        settings.peering.priority = (
            options.priority if options.priority is not None else default_priority()
        )
        settings.peering.mandatory = True
    return settings


def default_priority(now: float | None = None) -> int:
    """A Kopf peering priority that grows with the start time (milliseconds, plus a random
    tie-breaker below them).

    A container restarted after a crash must not wait for its own ghost: the dead process's
    peering entry stays "alive" until its lifetime (60 s) runs out, and a lower or equal
    priority would keep the new process paused (and unready) that long. Newest wins: a
    newer replica takes over, and two replicas never tie.
    """
    started_ms = int((time.time() if now is None else now) * 1000)
    return started_ms * 1000 + random.randint(0, 999)


async def run_operator(
    options: OperatorOptions,
    auth: AuthConfig,
    *,
    stop_flag: asyncio.Event | None = None,
    ready_flag: asyncio.Event | None = None,
    credentials: kopf.ConnectionInfo | None = None,
    settings: kopf.OperatorSettings | None = None,
) -> None:
    """Run until `stop_flag` is set (or Kopf stops on a signal). `credentials` bypasses the
    usual login (service account in a pod, else kubeconfig): tests point it at an emulator."""
    # Large blocks (a TLS connection's read buffer, a LIST answer) go back when freed.
    fix_mmap_threshold()
    coordinator = GroupCoordinator(
        CoordinatorConfig(
            group_initial_rebalance_delay_ms=options.initial_rebalance_delay_ms,
            group_min_session_timeout_ms=options.min_session_timeout_ms,
        ),
        SystemClock(),
        # Only the default path's directory is created; a mistyped --store fails loudly.
        open_store(options.store, create_dirs=options.store == DEFAULT_STORE),
    )
    if options.peering:
        # The store is loaded only once this replica is the active one (peering.py: a
        # paused replica must not hold it); opened now all the same, for the server's
        # startup, which reads the store's instance secret (the members' keys).
        await coordinator.store.open()
    else:
        await coordinator.start()
    pod_auth = None
    bindings = PodBindings(lambda: operator.observed.pods)
    if options.member_token_audience:
        # The operator's API access reviews the tokens; its pod informer binds them.
        pod_auth = PodAuth(
            ReviewCache(
                lambda token, audiences: token_reviewer(operator.kube)(token, audiences),
                options.member_token_audience,
                time.time,
            ),
            bindings,
        )
    app = create_app(
        coordinator,
        auth,
        manage_coordinator=False,
        max_body_bytes=options.max_body_bytes,
        pod_auth=pod_auth,
    )
    tls_files = (
        options.coordinator_tls.files
        if isinstance(options.coordinator_tls, ServingCertIssuer)
        else options.coordinator_tls
    )
    server = await start_server(
        app,
        options.coordinator_host,
        options.coordinator_port,
        tls=ReloadingTls(tls_files) if tls_files is not None else None,
    )
    # An issued certificate is renewed in the background (coordinator_cert.py).
    renewal = (
        asyncio.create_task(renew_periodically(options.coordinator_tls))
        if isinstance(options.coordinator_tls, ServingCertIssuer)
        else None
    )
    log.info(
        "coordinator listening on %s; members are told %s", server.url, options.coordinator_url
    )
    # Kopf's credentials, shared by its watches and the operator's own calls: a 401 on
    # either makes Kopf run the login handlers again, and both use the new credentials.
    vault = Vault()
    # Per-group member tokens (from Secrets) are registered with the server at runtime.
    operator = Operator(
        coordinator,
        KubeApi(vault),
        options.coordinator_url,
        authenticator=authenticator_of(app),
        member_token_audience=options.member_token_audience,
        member_health_port=options.member_health_port,
        # The server's registry: its /metrics shows the operator's series too.
        metrics=OperatorMetrics(
            app[CONTEXT].metrics.registry, partition_lag=options.partition_lag_metrics
        ),
        journal=RebalanceJournal(options.kafka_journal_dir) if options.kafka_journal_dir else None,
        kafka_settings=options.kafka_settings,
    )
    # The lag route answers from the operator's figures (embedded groups with spec.source).
    serve_group_lag(app, operator.lag_figures.get)
    registry = kopf.OperatorRegistry()
    handlers.register(
        registry,
        interval=options.interval,
        resync=options.resync,
        webhook=options.webhook_port is not None,
        namespaces=options.namespaces,
        secret_watch=options.secret_watch,
    )
    operator_settings = settings or kopf_settings(options)
    # With peering, only the active replica is ready (Kopf's rule, see peering.py), so the
    # coordinator and webhook Services route to it alone; a paused one also refuses members.
    pod_name = os.environ.get("POD_NAME") or None
    identity = f"{pod_name or socket.gethostname()}-{uuid.uuid4().hex[:8]}"
    gate: PeeringGate | None = None
    watcher: asyncio.Task[None] | None = None
    if options.peering:
        gate = PeeringGate()
        add_readiness_gate(app, gate)
        # Passes too: a replica that does not hold the store decides nothing (Kopf's pause
        # holds its handlers, not the operator's own informers and resync).
        operator.acting = gate
    # Not ready before every existing group's member token is registered again (readiness.py).
    add_readiness_gate(app, operator.tokens_gate)
    if pod_auth is not None:
        # Nor before the pod informer's first listing: until then no pod token binds.
        add_readiness_gate(app, bindings.ready)
    lister: asyncio.Task[None] | None = None
    freezer = (
        asyncio.create_task(
            freeze_periodically(options.gc_freeze_interval, options.gc_full_interval),
            name="gc-freeze",
        )
        if options.gc_freeze_interval > 0
        else None
    )

    @kopf.on.login(registry=registry)
    async def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        nonlocal watcher, lister
        info = credentials or _default_login(**kwargs)
        if info is not None:
            # Kopf puts `info` in the vault, where `operator.kube` finds it on every call.
            if lister is None:
                lister = asyncio.create_task(
                    expect_groups(
                        lambda: operator.kube,
                        operator.tokens_gate,
                        list(options.namespaces),
                        on_listed=lambda listed: register_listed_tokens(operator, listed),
                    ),
                    name="staticfleet-expect-groups",
                )
            if gate is not None and watcher is None:
                # Only once logged in: before that there is no API to ask.
                watcher = asyncio.create_task(
                    watch_peering(
                        lambda: operator.kube,
                        gate,
                        coordinator,
                        name=options.peering or "",
                        namespaces=list(options.namespaces),
                        identity=identity,
                        priority=operator_settings.peering.priority,
                        on_active=operator.request_every_pass,
                        pod=pod_name,
                        lifetime_s=operator_settings.peering.lifetime,
                    ),
                    name="staticfleet-peering",
                )
        return info

    try:
        await kopf.operator(
            registry=registry,
            settings=operator_settings,
            # Kopf's Identity is a str NewType in a private module; the value is a str.
            identity=cast(Any, identity),
            standalone=options.peering is None,
            peering_name=options.peering,
            clusterwide=not options.namespaces,
            namespaces=list(options.namespaces),
            liveness_endpoint=(
                f"http://0.0.0.0:{options.health_port}/healthz" if options.health_port else None
            ),
            memo=kopf.Memo(operator=operator),
            vault=vault,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        if operator.passes is not None:
            await operator.passes.close()
        for task in (watcher, lister, freezer, renewal):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        await server.stop()
        await coordinator.close()
        await operator.kafka.close()
        await operator.kube.close()  # closed with Kopf's vault already; again is harmless


def _default_login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def namespaces_of(values: Sequence[str] | None) -> tuple[str, ...]:
    """`--namespace` values; each may also be a comma-separated list."""
    found: list[str] = []
    for value in values or ():
        found.extend(part.strip() for part in value.split(",") if part.strip())
    return tuple(dict.fromkeys(found))
