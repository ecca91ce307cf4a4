"""Which rolling bounces a fleet needs, and what each member offers (KIP-429 upgrade path).

The plan is derived from what the pods were *created with*, never from memory alone: the
operator's persisted progress can be lost, the pods' recorded protocol and template hash
cannot (they are annotations stamped at creation). So the same function both starts a
rollout and recovers one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from coordinator.client.config import RebalanceProtocolSetting

EAGER = RebalanceProtocolSetting.EAGER
COMPATIBLE = RebalanceProtocolSetting.COMPATIBLE
COOPERATIVE = RebalanceProtocolSetting.COOPERATIVE
CONSUMER = RebalanceProtocolSetting.CONSUMER

# What a ConsumerGroup spec may ask for: `compatible` is only ever a bridge between them.
DESIRED_PROTOCOLS = frozenset({EAGER, COOPERATIVE, CONSUMER})


@dataclass(frozen=True, slots=True)
class Assignors:
    """The assignor names from `spec.rebalance`: the protocol names members put in JoinGroup."""

    eager: str
    cooperative: str

    def offered_by(self, protocol: RebalanceProtocolSetting) -> frozenset[str]:
        """The protocol names a member created with `protocol` offers (as the client does);
        none on the consumer protocol, where the broker assigns."""
        if protocol is CONSUMER:
            return frozenset()
        if protocol is EAGER:
            return frozenset({self.eager})
        if protocol is COOPERATIVE:
            return frozenset({self.cooperative})
        return frozenset({self.cooperative, self.eager})

    @property
    def distinguishable(self) -> bool:
        # With one name for both, an eager, a compatible and a cooperative member offer the
        # same thing, so the coordinator's view cannot prove which behaviour a member has.
        return self.eager != self.cooperative


def protocol_bounces(
    pod_protocols: Iterable[RebalanceProtocolSetting], desired: RebalanceProtocolSetting
) -> tuple[RebalanceProtocolSetting, ...]:
    """The protocol of each rolling bounce still needed to bring every pod to `desired`.

    Eager and cooperative members share no assignor, so whenever both ends are present in
    the fleet (or the move crosses from one to the other) the fleet first goes through
    `compatible`, which offers both and behaves eagerly. To or from Kafka's consumer protocol
    is one bounce: a consumer group takes classic members of any assignor while it migrates
    (the broker assigns them), and a classic member joining it needs an assignor in common
    with the other classic members only, which a single classic target gives.
    """
    if desired not in DESIRED_PROTOCOLS:
        raise ValueError(
            f"desired protocol must be eager or cooperative (or consumer), not {desired.value!r}"
        )
    present = set(pod_protocols)
    if desired is CONSUMER:
        return (CONSUMER,) if present - {CONSUMER} else ()
    opposite = EAGER if desired is COOPERATIVE else COOPERATIVE
    if opposite in present:
        return (COMPATIBLE, desired)
    if present - {desired}:
        return (desired,)
    return ()


def rollout_bounces(
    pods: Iterable[tuple[RebalanceProtocolSetting, str]],
    desired: RebalanceProtocolSetting,
    desired_template_hash: str,
) -> tuple[RebalanceProtocolSetting, ...]:
    """Bounces for a fleet given each pod's (protocol, template hash) at creation.

    A template change alone is one static rolling bounce with the protocol unchanged; with a
    protocol change the new template rides along (every bounce recreates from the desired
    template), so it never costs an extra bounce.
    """
    created_with = list(pods)
    bounces = protocol_bounces((protocol for protocol, _ in created_with), desired)
    if bounces:
        return bounces
    if any(template_hash != desired_template_hash for _, template_hash in created_with):
        return (desired,)
    return ()


def uniform_protocol(
    protocols: Iterable[RebalanceProtocolSetting],
) -> RebalanceProtocolSetting | None:
    """The one protocol every pod was created with; None when they differ or there are none."""
    distinct = set(protocols)
    return distinct.pop() if len(distinct) == 1 else None


def protocol_for_new_pod(
    rollout_protocol: RebalanceProtocolSetting | None,
    pod_protocols: Iterable[RebalanceProtocolSetting],
    desired: RebalanceProtocolSetting,
) -> RebalanceProtocolSetting:
    """The protocol a pod created outside a bounce gets (scale-up, a replaced pod, a new
    Spark executor): the one of the bounce the fleet is in, so the pod needs no bounce.

    `rollout_protocol` is the current bounce's protocol from the persisted state. Without
    one (no rollout, or the state was lost) the phase is read from the other pods, as a
    re-plan would: the first bounce they still need, or `desired` when they need none.
    Either way the pod can join: a bridge bounce's `compatible` shares an assignor with
    every member, and a final bounce is only reached once every member offers its assignor
    (the coordinator refuses a join that shares no protocol with the group, so a guess
    could cost availability, never ownership).
    """
    if rollout_protocol is not None:
        return rollout_protocol
    bounces = protocol_bounces(pod_protocols, desired)
    return bounces[0] if bounces else desired
