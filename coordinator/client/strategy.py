"""What a member offers in JoinGroup and how it behaves in a rebalance (KIP-429).

The offered protocol names come from `MemberConfig.rebalance_protocol`; each name is an
assignor. Kafka's rule decides the behaviour: a member follows the highest rebalance
protocol supported by *all* the assignors it offers. That is why `compatible` (cooperative
assignor + an eager-only one) behaves eagerly. We apply the rule as a check rather than a
switch: `eager` and `compatible` always behave eagerly (the safe direction), and
`cooperative` refuses to start unless every offered assignor supports cooperative
rebalancing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from coordinator.assignors import PartitionAssignor, RebalanceProtocol, get_assignor
from coordinator.client.config import MemberConfig, RebalanceProtocolSetting
from coordinator.messages import JoinGroupProtocol
from coordinator.protocol import Subscription, TopicPartition, encode_subscription

PROTOCOL_TYPE = "consumer"
# v3 carries owned partitions (KIP-429), the generation (KIP-792) and the rack (KIP-881).
SUBSCRIPTION_VERSION = 3

AssignorFactory = Callable[[str], PartitionAssignor]


class ConfigurationError(ValueError):
    """The member's settings cannot work (detected before contacting the coordinator)."""


@dataclass(frozen=True, slots=True)
class MemberStrategy:
    # Protocol name -> the assignor instance this member uses for it, most preferred first.
    # One instance per name for the member's whole life: assignors keep memory between
    # rebalances (sticky generation, KIP-268 used version).
    assignors: dict[str, PartitionAssignor]
    behaviour: RebalanceProtocol

    @property
    def cooperative(self) -> bool:
        return self.behaviour is RebalanceProtocol.COOPERATIVE

    def join_protocols(
        self,
        topics: Iterable[str],
        owned: Iterable[TopicPartition],
        generation_id: int,
    ) -> list[JoinGroupProtocol]:
        """Metadata per offered protocol. Eager members have revoked everything before
        joining, so they never claim owned partitions."""
        sorted_topics = tuple(sorted(set(topics)))
        claimed = tuple(sorted(owned)) if self.cooperative else ()
        return [
            JoinGroupProtocol(
                name=name,
                metadata=encode_subscription(
                    Subscription(
                        topics=sorted_topics,
                        user_data=assignor.subscription_user_data(sorted_topics),
                        owned_partitions=claimed,
                        generation_id=generation_id,
                        rack_id=None,
                    ),
                    version=SUBSCRIPTION_VERSION,
                ),
            )
            for name, assignor in self.assignors.items()
        ]


def build_strategy(config: MemberConfig, factory: AssignorFactory = get_assignor) -> MemberStrategy:
    assignors: dict[str, PartitionAssignor] = {}
    for name in config.offered_assignors:
        try:
            assignors[name] = factory(name)
        except (KeyError, ValueError) as error:
            raise ConfigurationError(f"unknown assignor {name!r}: {error}") from error
    highest = highest_common_protocol(assignors.values())
    setting = config.rebalance_protocol
    if setting is RebalanceProtocolSetting.COOPERATIVE:
        if highest is not RebalanceProtocol.COOPERATIVE:
            raise ConfigurationError(
                f"rebalance_protocol 'cooperative' needs an assignor that supports cooperative "
                f"rebalancing; {config.cooperative_assignor!r} supports only "
                f"{_names(assignors[config.cooperative_assignor].supported_protocols)}"
            )
        return MemberStrategy(assignors, RebalanceProtocol.COOPERATIVE)
    if setting is RebalanceProtocolSetting.COMPATIBLE:
        cooperative = assignors[config.cooperative_assignor]
        if RebalanceProtocol.COOPERATIVE not in cooperative.supported_protocols:
            raise ConfigurationError(
                f"rebalance_protocol 'compatible' offers {config.cooperative_assignor!r} as the "
                f"cooperative assignor, but it supports only "
                f"{_names(cooperative.supported_protocols)}"
            )
    eager = assignors[config.eager_assignor]
    if RebalanceProtocol.EAGER not in eager.supported_protocols:
        raise ConfigurationError(
            f"{config.eager_assignor!r} cannot be the eager assignor: it supports only "
            f"{_names(eager.supported_protocols)}"
        )
    return MemberStrategy(assignors, RebalanceProtocol.EAGER)


def highest_common_protocol(assignors: Iterable[PartitionAssignor]) -> RebalanceProtocol | None:
    """Kafka's ConsumerCoordinator rule: the highest protocol every assignor supports."""
    common: set[RebalanceProtocol] | None = None
    for assignor in assignors:
        supported = set(assignor.supported_protocols)
        common = supported if common is None else common & supported
    if not common:
        return None
    if RebalanceProtocol.COOPERATIVE in common:
        return RebalanceProtocol.COOPERATIVE
    return RebalanceProtocol.EAGER


def _names(protocols: Iterable[RebalanceProtocol]) -> str:
    return ", ".join(str(protocol.value) for protocol in protocols) or "nothing"
