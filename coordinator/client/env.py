"""The environment a member process is configured by (the operator injects exactly these).

Kept in the library, not the CLI, because it is a contract between two parts: the operator
writes these names into pod specs, and `staticfleet member run` reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

COORDINATOR_URL: Final = "STATICFLEET_COORDINATOR_URL"
GROUP_ID: Final = "STATICFLEET_GROUP_ID"
INSTANCE_ID: Final = "STATICFLEET_INSTANCE_ID"  # empty or unset: a dynamic member
TOPICS: Final = "STATICFLEET_TOPICS"  # comma-separated
# eager, compatible, cooperative (the classic protocol), or consumer (KIP-848, kafka:// only)
REBALANCE_PROTOCOL: Final = "STATICFLEET_REBALANCE_PROTOCOL"
EAGER_ASSIGNOR: Final = "STATICFLEET_EAGER_ASSIGNOR"
COOPERATIVE_ASSIGNOR: Final = "STATICFLEET_COOPERATIVE_ASSIGNOR"
SESSION_TIMEOUT_MS: Final = "STATICFLEET_SESSION_TIMEOUT_MS"
REBALANCE_TIMEOUT_MS: Final = "STATICFLEET_REBALANCE_TIMEOUT_MS"
HEARTBEAT_INTERVAL_MS: Final = "STATICFLEET_HEARTBEAT_INTERVAL_MS"
TOKEN: Final = "STATICFLEET_TOKEN"
EVENT_LOG: Final = "STATICFLEET_EVENT_LOG"  # JSON-lines path; unset or "-": stdout
# Set: a hot standby (holds nothing until promoted; then it is the instance id it was given).
STANDBY_ID: Final = "STATICFLEET_STANDBY_ID"
# What the member reads: unset or "synthetic", or kafka://host:port. Not in ALL: the operator
# does not inject it, a pod template may set it.
SOURCE: Final = "STATICFLEET_SOURCE"
# A Kafka client settings file (.properties, librdkafka names; docs/kafka.md, "Secured
# clusters") for kafka:// coordinators and sources. Not in ALL: the operator sets it only for
# groups on a secured cluster, mounting the file from a Secret.
KAFKA_CONFIG: Final = "STATICFLEET_KAFKA_CONFIG"
# The CA bundle (PEM) an https:// coordinator's certificate must chain to. Not in ALL: the
# operator sets it only when its coordinator serves TLS, mounting its TLS Secret's ca.crt.
COORDINATOR_CA_FILE: Final = "STATICFLEET_COORDINATOR_CA_FILE"
# The broker's assignor (group.remote.assignor) for a member on the consumer protocol
# (REBALANCE_PROTOCOL=consumer); unset: the broker's default. Not in ALL: set only then.
REMOTE_ASSIGNOR: Final = "STATICFLEET_REMOTE_ASSIGNOR"
# Set (milliseconds): a standby for its INSTANCE_ID on Kafka's consumer protocol, joining
# again while the broker still holds the id, for up to this long (docs/kafka.md, "Hot
# standby"). Not in ALL: set only on such a standby.
STANDBY_WAIT_MS: Final = "STATICFLEET_STANDBY_WAIT_MS"
# The member's Kafka client id; unset: staticfleet-member-<instance id>. The operator sets
# it to the pod's name on a consumer-protocol group with standbys, where two pods share an
# instance id: ConsumerGroupDescribe's client id then names the pod holding it. Not in ALL.
CLIENT_ID: Final = "STATICFLEET_CLIENT_ID"
# A file holding the bearer token, read again when it changes: the pod's projected
# ServiceAccount token (docs/server.md, "Members known by their pod"). Instead of TOKEN. Not
# in ALL: the operator sets it only for groups whose members are known by their pod.
TOKEN_FILE: Final = "STATICFLEET_TOKEN_FILE"
# The port of the member's health endpoints (/livez, /readyz; staticfleet.member.health);
# unset or 0: none. Not in ALL: the operator sets it only on the containers that run `member
# run` and gives them httpGet probes on it (docs/client.md, "Health endpoints").
HEALTH_PORT: Final = "STATICFLEET_HEALTH_PORT"
# How long a stopping member may spend closing (the revoke's commit, a LeaveGroup) before it
# gives its partitions up uncommitted; unset: Kafka's 30 s (KafkaConsumer.close()). Not in
# ALL: the operator sets it from the pod's terminationGracePeriodSeconds where the template
# does not, so a member stops of itself before the kubelet's SIGKILL (docs/client.md).
CLOSE_TIMEOUT_MS: Final = "STATICFLEET_CLOSE_TIMEOUT_MS"

ALL: Final = (
    COORDINATOR_URL,
    GROUP_ID,
    INSTANCE_ID,
    TOPICS,
    REBALANCE_PROTOCOL,
    EAGER_ASSIGNOR,
    COOPERATIVE_ASSIGNOR,
    SESSION_TIMEOUT_MS,
    REBALANCE_TIMEOUT_MS,
    HEARTBEAT_INTERVAL_MS,
    TOKEN,
    EVENT_LOG,
    STANDBY_ID,
)


def text(environ: Mapping[str, str], name: str) -> str | None:
    """A setting's value, with empty meaning unset (pod specs often carry empty values)."""
    value = environ.get(name, "").strip()
    return value or None


def split_topics(value: str) -> tuple[str, ...]:
    return tuple(topic.strip() for topic in value.split(",") if topic.strip())
