"""Partitions as small integers, so large assignments need no per-partition Python objects.

A group of 2,000 members over 1,000,000 partitions is where the sticky assignors must stay
fast: sets and dicts of `TopicPartition` tuples cost hundreds of bytes and a hash per
partition. Numbering the partitions of the sorted topics 0..N-1 turns "all partitions in
(topic, partition) order" into `range(N)`, ownership into a flat list indexed by number, and
lets assignments be plain lists of ints that are converted back only once, at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import accumulate

from coordinator.assignors.base import java_string_key
from coordinator.protocol import TopicPartition


class PartitionSpace:
    """The partitions of some topics, numbered in Kafka's (topic, partition) order.

    Topics are sorted as Java sorts strings; partition `p` of the `t`-th topic is number
    `offsets[t] + p`. Partition objects seen in the input are kept and handed back in the
    output, which saves creating a million tuples when most partitions stay where they are.
    """

    __slots__ = ("_objects", "_slot_by_topic", "_topic_of", "counts", "offsets", "size", "topics")

    def __init__(self, partitions_per_topic: Mapping[str, int], topics: Iterable[str]) -> None:
        self.topics: tuple[str, ...] = tuple(sorted(set(topics), key=java_string_key))
        self.counts: tuple[int, ...] = tuple(max(0, partitions_per_topic[t]) for t in self.topics)
        self.offsets: tuple[int, ...] = tuple(accumulate(self.counts, initial=0))[:-1]
        self.size: int = sum(self.counts)
        # topic -> (offset, count, topic index)
        self._slot_by_topic: dict[str, tuple[int, int, int]] = {
            topic: (offset, count, index)
            for index, (topic, offset, count) in enumerate(
                zip(self.topics, self.offsets, self.counts, strict=True)
            )
        }
        self._objects: list[TopicPartition | None] = [None] * self.size
        self._topic_of: list[int] | None = None

    def topic_indices(self, topics: Iterable[str]) -> frozenset[int]:
        """Positions of those of `topics` that are in this space."""
        slot_by_topic = self._slot_by_topic
        return frozenset(slot_by_topic[t][2] for t in topics if t in slot_by_topic)

    def ids_of(self, partitions: Iterable[TopicPartition]) -> list[int]:
        """Numbers of the given partitions, skipping those outside this space (unknown
        topics, partitions beyond the topic's count), in input order."""
        slot_by_topic = self._slot_by_topic
        objects = self._objects
        ids: list[int] = []
        append = ids.append
        for tp in partitions:
            topic, partition = tp
            slot = slot_by_topic.get(topic)
            if slot is not None and 0 <= partition < slot[1]:
                number = slot[0] + partition
                objects[number] = tp
                append(number)
        return ids

    def ids_of_topic(self, topic_index: int) -> range:
        offset = self.offsets[topic_index]
        return range(offset, offset + self.counts[topic_index])

    @property
    def topic_of(self) -> list[int]:
        """Topic index of every partition number (built on first use: N list slots that
        all point at a few shared ints)."""
        if self._topic_of is None:
            topic_of: list[int] = []
            for index, count in enumerate(self.counts):
                topic_of.extend([index] * count)
            self._topic_of = topic_of
        return self._topic_of

    def partition_major_order(self, ids: Iterable[int]) -> list[int]:
        """`ids` sorted by (partition, topic): the order in which Kafka's sticky assignor
        keeps owned partitions, so that what a member gives up is spread over topics."""
        topic_of = self.topic_of
        offsets = self.offsets
        width = len(self.topics)
        return sorted(ids, key=lambda i: (i - offsets[topic_of[i]]) * width + topic_of[i])

    def to_partitions(self, ids: Iterable[int]) -> tuple[TopicPartition, ...]:
        """The `TopicPartition`s for `ids`, reusing the input's objects where there were any."""
        objects = self._objects
        topic_of = self.topic_of
        topics = self.topics
        offsets = self.offsets
        result: list[TopicPartition] = []
        append = result.append
        for number in ids:
            tp = objects[number]
            if tp is None:
                index = topic_of[number]
                tp = TopicPartition(topics[index], number - offsets[index])
            append(tp)
        return tuple(result)
