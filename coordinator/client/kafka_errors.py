"""The ways a Kafka cluster refuses a client that reached it: each its own error.

None of these is a `TransportError`: retrying cannot fix a wrong password, an untrusted
certificate or a missing ACL, so a member stops on them (naming the cause) instead of
retrying for ever, and the operator shows each as its own Degraded reason and Event
(`reason`), never as CoordinatorUnreachable. docs/kafka.md, "Secured clusters".

Messages never contain a secret: they name the user, mechanism, endpoint or resource.
"""

from __future__ import annotations

from typing import ClassVar, Final

from coordinator.client.access import AccessError


class KafkaAccessError(AccessError):
    """The cluster was reached and refused us; not retriable."""

    reason: ClassVar[str] = "KafkaAccessError"


class KafkaAuthenticationFailed(KafkaAccessError):
    """Wrong password, unknown user, a refused OAuth client or token."""

    reason = "KafkaAuthenticationFailed"


class KafkaTLSVerificationFailed(KafkaAccessError):
    """A certificate was not accepted, ours or the broker's: the message says which and why
    (expired, self-signed/untrusted, ...)."""

    reason = "KafkaTLSVerificationFailed"


class KafkaTLSHostnameMismatch(KafkaAccessError):
    """The broker's certificate is valid but names another host than the one we dialled."""

    reason = "KafkaTLSHostnameMismatch"


class KafkaSaslMechanismUnsupported(KafkaAccessError):
    """The listener does not enable our SASL mechanism (or is not a SASL listener)."""

    reason = "KafkaSaslMechanismUnsupported"


# A SaslHandshake answered ILLEGAL_SASL_STATE: the listener is PLAINTEXT or SSL. Both of a
# member's clients (the coordinator's handshake, the Kafka source's librdkafka) say it so.
NOT_A_SASL_LISTENER: Final = (
    "this listener does not use SASL (is security.protocol right? the listener may be "
    "PLAINTEXT or SSL)"
)


class KafkaAuthorizationFailed(KafkaAccessError):
    """An ACL is missing: `operation` (the Kafka request, e.g. "JoinGroup") on
    `resource_type` ("Group", "Topic", "Cluster") `resource_name`."""

    reason = "KafkaAuthorizationFailed"

    def __init__(
        self, operation: str, resource_type: str, resource_name: str, detail: str = ""
    ) -> None:
        self.operation = operation
        self.resource_type = resource_type
        self.resource_name = resource_name
        text = f"not authorized: {operation} on {resource_type} {resource_name!r}"
        super().__init__(f"{text} ({detail})" if detail else text)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.operation, self.resource_type, self.resource_name))


# Kafka's error codes, raw: coordinator.errors.ErrorCode holds only what our coordinator
# answers (it has no CLUSTER_AUTHORIZATION_FAILED and no SASL codes).
TOPIC_AUTHORIZATION_FAILED: Final = 29
GROUP_AUTHORIZATION_FAILED: Final = 30
CLUSTER_AUTHORIZATION_FAILED: Final = 31
UNSUPPORTED_SASL_MECHANISM: Final = 33
ILLEGAL_SASL_STATE: Final = 34
SASL_AUTHENTICATION_FAILED: Final = 58

# The authorization codes -> the resource type they are about.
AUTHORIZATION_RESOURCES: Final = {
    TOPIC_AUTHORIZATION_FAILED: "Topic",
    GROUP_AUTHORIZATION_FAILED: "Group",
    CLUSTER_AUTHORIZATION_FAILED: "Cluster",
}
CLUSTER_RESOURCE_NAME: Final = "kafka-cluster"  # Kafka's name for the one Cluster resource


def authorization_failed(
    code: int, operation: str, resource_name: str, detail: str = ""
) -> KafkaAuthorizationFailed | None:
    """The error for an answer's code, or None when the code is not an authorization
    failure. `resource_name` is the group or topic the request was about (ignored for a
    cluster-level refusal)."""
    resource_type = AUTHORIZATION_RESOURCES.get(int(code))
    if resource_type is None:
        return None
    name = CLUSTER_RESOURCE_NAME if resource_type == "Cluster" else resource_name
    return KafkaAuthorizationFailed(operation, resource_type, name, detail)
