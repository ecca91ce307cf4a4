"""What every handler shares: the clients, the read side and the operator's memory.

The pass reads through `observed` (Kopf's index of ConsumerGroups and the informer's pods
and Secrets, with the operator's own writes laid over them), the embedded coordinator and
the Kafka backends; it writes only through the actuator (actuator.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from coordinator import GroupCoordinator
from coordinator.client.kafka_settings import PLAINTEXT_SETTINGS, KafkaClientSettings
from coordinator.server import Authenticator
from coordinator.server.models import LagFigure
from staticfleet_operator.backends import EmbeddedBackend, GroupBackend, KafkaBackends
from staticfleet_operator.crd import ConsumerGroupSpec, KafkaClientSpec
from staticfleet_operator.group_memory import Memories
from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.kafka_auth import SecretData, client_settings, decoded, referenced_secrets
from staticfleet_operator.kafka_journal import RebalanceJournal
from staticfleet_operator.kube import KubeApi
from staticfleet_operator.members import MemberSettings
from staticfleet_operator.metrics import OperatorMetrics
from staticfleet_operator.observed import Observed
from staticfleet_operator.passes import Passes
from staticfleet_operator.readiness import TokensGate


class NotActing(Exception):
    """This replica stopped being the active one during a pass: the pass decides nothing."""


@dataclass
class Operator:
    coordinator: GroupCoordinator
    kube: KubeApi
    coordinator_url: str
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # The embedded server's authenticator: each group's member token is registered with it.
    # None: no server to tell (member tokens are still put in Secrets and pod env).
    authenticator: Authenticator | None = None
    # Set: member pods present their projected ServiceAccount token for this audience, which
    # the embedded server reviews (docs/server.md, "Members known by their pod"); None: the
    # group's token Secret.
    member_token_audience: str | None = None
    member_health_port: int | None = None  # `--member-health-port` (MemberSettings)
    # Prometheus series (the process passes the coordinator server's registry in).
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    # Readiness after a restart: told of each group whose token was reconciled (readiness.py).
    tokens_gate: TokensGate = field(default_factory=TokensGate)
    # Connections to the Kafka clusters of Kafka-coordinated groups, one per bootstrap list
    # and settings.
    kafka: KafkaBackends = field(default_factory=KafkaBackends)
    # The operator's own Kafka settings for groups without spec.coordinator.kafka
    # (`operator run --kafka-config`).
    kafka_settings: KafkaClientSettings = PLAINTEXT_SETTINGS
    # Rebalances of Kafka-coordinated groups as seen by describe (None: not recorded).
    journal: RebalanceJournal | None = None
    # The cluster as last seen, and the writes not yet seen in it (observed.py).
    observed: Observed = field(default_factory=Observed)
    # Each group's memory between passes (group_memory.py).
    memories: Memories = field(default_factory=Memories)
    # Status patches written (with `kube.writes`: whether a pass acted).
    status_writes: int = 0
    # Embedded groups' lag with spec.source, by group id, as status shows it: the
    # coordinator server answers GET /v1/groups/{group_id}/lag from it (an autoscaler's
    # source, docs/operator.md "Autoscaling").
    lag_figures: dict[str, LagFigure] = field(default_factory=dict)
    # Runs the passes events ask for (passes.py); made by the handlers on first use.
    passes: Passes | None = None
    # Whether this replica acts: with peering, only the active one that holds the store
    # (peering.py); a pass elsewhere is dropped, and taking over asks for every group's.
    acting: Callable[[], bool] = field(default=lambda: True)

    def request_every_pass(self) -> None:
        """A pass for every indexed group (this replica has just taken over)."""
        if self.passes is not None:
            for ref in self.observed.group_refs():
                self.passes.request(*ref)

    async def backend(self, ref: GroupRef, spec: ConsumerGroupSpec) -> GroupBackend:
        """The group's coordinator: the Kafka cluster it names (reached with the settings
        of spec.coordinator.kafka and its Secrets, read now: a rotation takes effect on
        this pass), else the embedded one. Raises `KafkaAccessError` (e.g.
        KafkaCredentialsMissing) when the settings cannot be made."""
        coordinator = spec.coordinator
        if not (coordinator.is_kafka and coordinator.bootstrap_servers):
            return EmbeddedBackend(self.coordinator)
        settings = await read_client_settings(
            self.kube, self.observed, ref.namespace, coordinator.kafka, self.kafka_settings
        )
        return await self.kafka.for_group(str(ref), coordinator.bootstrap_servers, settings)

    def settings(self, name: str) -> MemberSettings:
        return MemberSettings(
            coordinator_url=self.coordinator_url,
            group_name=name,
            token_audience=self.member_token_audience,
            member_health_port=self.member_health_port,
        )


async def read_client_settings(
    kube: KubeApi,
    observed: Observed | None,
    namespace: str,
    kafka: KafkaClientSpec | None,
    default: KafkaClientSettings,
    where: str = "spec.coordinator.kafka",
) -> KafkaClientSettings:
    """`client_settings` with the Secrets read: the index first (Opaque Secrets), then the
    API (a kubernetes.io/tls Secret is not indexed)."""
    secrets: dict[str, SecretData] = {}
    for name in referenced_secrets(kafka):
        body = await observed.secret(kube, namespace, name) if observed is not None else None
        if body is None:
            body = await kube.get_secret(namespace, name)
        secrets[name] = decoded(body)
    return client_settings(kafka, secrets, default, namespace=namespace, where=where)
