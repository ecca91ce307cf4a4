"""Hypothesis strategies: groups with subscriptions and (maybe conflicting) previous owners."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from coordinator.protocol import Subscription, TopicPartition, encode_sticky_user_data

TOPICS = ("a", "b", "c", "d")


@dataclass(frozen=True)
class Group:
    partitions_per_topic: dict[str, int]
    topics: dict[str, tuple[str, ...]]
    owned: dict[str, tuple[TopicPartition, ...]]
    generation: dict[str, int]
    instance_ids: dict[str, str | None]

    def cooperative_subscriptions(self) -> dict[str, Subscription]:
        """Owned partitions and generation in the subscription (v2, cooperative-sticky)."""
        return {
            m: Subscription(
                self.topics[m],
                owned_partitions=self.owned[m],
                generation_id=self.generation[m],
                group_instance_id=self.instance_ids[m],
            )
            for m in self.topics
        }

    def sticky_subscriptions(self) -> dict[str, Subscription]:
        """The same claims in sticky user data (v1; v0 when the generation is unknown)."""
        return {
            m: Subscription(
                self.topics[m],
                user_data=encode_sticky_user_data(
                    self.owned[m], None if self.generation[m] == -1 else self.generation[m]
                ),
                group_instance_id=self.instance_ids[m],
            )
            for m in self.topics
        }


@st.composite
def groups(draw: st.DrawFn, *, equal_subscriptions: bool, conflicts: bool = True) -> Group:
    topic_names = draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
    ppt = {t: draw(st.integers(0, 9)) for t in topic_names}
    member_ids = draw(
        st.lists(st.text("mnop", min_size=1, max_size=3), min_size=1, max_size=7, unique=True)
    )
    subscribable = st.sets(st.sampled_from((*topic_names, "unknown")))
    common = draw(subscribable)
    topics = {
        m: tuple(sorted(common if equal_subscriptions else draw(subscribable))) for m in member_ids
    }
    generation = {m: draw(st.integers(-1, 3)) for m in member_ids}
    # One previous owner (or none) per partition, some partitions past the topic's end and
    # of topics that no longer exist; then, optionally, extra claims that conflict.
    owned: dict[str, list[TopicPartition]] = {m: [] for m in member_ids}
    candidates = [TopicPartition(t, p) for t, n in ppt.items() for p in range(n + 1)]
    candidates.append(TopicPartition("gone", 0))
    owner_choice = st.one_of(st.none(), st.sampled_from(member_ids))
    for tp in candidates:
        owner = draw(owner_choice)
        if owner is not None:
            owned[owner].append(tp)
    if conflicts and candidates:
        for _ in range(draw(st.integers(0, 3))):
            owned[draw(st.sampled_from(member_ids))].append(draw(st.sampled_from(candidates)))
    instance_ids = {m: draw(st.one_of(st.none(), st.just("i-" + m))) for m in member_ids}
    return Group(ppt, topics, {m: tuple(v) for m, v in owned.items()}, generation, instance_ids)
