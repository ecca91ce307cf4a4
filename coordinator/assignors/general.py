"""General sticky assignment: members with different subscriptions and, for static-sticky,
different capacity weights. Correct and sticky; not built for a million partitions (the
equal-subscription case goes through `constrained` instead).

Balance is measured with the potential `sum(count**2 / weight)` over the members that may
receive partitions (weight 1 for everyone in Kafka's assignors). Moving one partition from
member `a` to member `b` lowers it exactly when `(2*count_b + 1) / weight_b <
(2*count_a - 1) / weight_a`; with equal weights that is Kafka's rule "move while
`count_a > count_b + 1`". Steps, after Kafka's GeneralAssignmentBuilder:

1. Members keep the partitions the caller lets them keep (their valid owned partitions of
   topics they still subscribe to).
2. Unassigned partitions, topics with the fewest possible receivers first, each go to the
   receiver whose potential grows least.
3. Single moves, newly assigned partitions first, while a move lowers the potential;
   a partition goes back to its owner from an older generation when that helps (Kafka's
   "prevAssignment"). When some partition of the topic must leave `a` for `b`, the one that
   costs least stickiness is chosen: one `b` owned before, else one `a` did not own before.
4. Kafka stops at step 3, which can leave an imbalance that only a chain of moves fixes
   (A takes only t1, B takes t1 and t2, C takes only t2; A:3 B:2 C:1 cannot improve by one
   move, but A->B in t1 and B->C in t2 gives 2/2/2). We also apply such chains (augmenting
   paths) while one lowers the potential. With no improving path left the potential is at
   its minimum: the assignment is as balanced as the subscriptions allow.
5. Of the assignments that balanced, the one that keeps the most partitions with the member
   that held them after step 1 (see `fewest_moves`): steps 2-4 are greedy and can move an
   owned partition where placing an unowned one differently would have spared the move.

Every move in steps 3-4 strictly lowers the potential, and every change in step 5 lowers the
potential or the moves, so all loops end.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from fractions import Fraction

from coordinator.assignors.fewest_moves import fewest_moves
from coordinator.assignors.ownership import NO_OWNER
from coordinator.assignors.partition_space import PartitionSpace


def general_assign(
    space: PartitionSpace,
    topics_of_member: Sequence[frozenset[int]],
    weights: Sequence[int],
    kept: Sequence[Sequence[int]],
    previous_owner: Mapping[int, int] | None = None,
) -> list[list[int]]:
    """Assign every partition of `space` whose topic has a receiver.

    `topics_of_member[m]` holds the topic indices member `m` subscribes to, `weights[m]`
    its capacity (0: receives nothing), `kept[m]` the partition numbers it starts with
    (ignored where it may not hold them), `previous_owner` maps a partition number to the
    member that owned it in an older generation. Returns each member's partition numbers,
    ascending.
    """
    balancer = _Balancer(space, topics_of_member, weights, kept, previous_owner or {})
    newly_assigned = balancer.assign_unassigned()
    balancer.move_single_partitions(newly_assigned)
    balancer.move_along_paths()
    balancer.keep_most_owned()
    return balancer.assignment()


class _Balancer:
    def __init__(
        self,
        space: PartitionSpace,
        topics_of_member: Sequence[frozenset[int]],
        weights: Sequence[int],
        kept: Sequence[Sequence[int]],
        previous_owner: Mapping[int, int],
    ) -> None:
        self.space = space
        self.topic_of = space.topic_of
        self.weights = weights
        self.previous_owner = previous_owner
        member_count = len(topics_of_member)
        topic_count = len(space.topics)
        # Per topic: the members that may receive its partitions, in member order.
        self.receivers: list[list[int]] = [
            [m for m in range(member_count) if weights[m] > 0 and t in topics_of_member[m]]
            for t in range(topic_count)
        ]
        self.receiver_sets = [frozenset(members) for members in self.receivers]
        # Topics with the fewest possible receivers first (Kafka's TopicComparator).
        self.topic_order = sorted(range(topic_count), key=lambda t: (len(self.receivers[t]), t))

        self.holder = [NO_OWNER] * space.size
        self.counts = [0] * member_count
        self.held: list[dict[int, set[int]]] = [{} for _ in range(member_count)]
        for member, ids in enumerate(kept):
            for number in ids:
                if (
                    self.holder[number] == NO_OWNER
                    and member in self.receiver_sets[self.topic_of[number]]
                ):
                    self._take(number, member)
        # Who held each partition before balancing: moving it elsewhere costs stickiness.
        self.origin = list(self.holder)

    # -- steps ------------------------------------------------------------------------------

    def assign_unassigned(self) -> list[int]:
        newly_assigned: list[int] = []
        for topic in self.topic_order:
            if not self.receivers[topic]:
                continue
            for number in self.space.ids_of_topic(topic):
                if self.holder[number] == NO_OWNER:
                    self._take(number, self._cheapest_receiver(topic, NO_OWNER))
                    newly_assigned.append(number)
        return newly_assigned

    def move_single_partitions(self, newly_assigned: list[int]) -> None:
        movable_topics = [t for t in self.topic_order if len(self.receivers[t]) >= 2]
        previously_held = [
            number
            for topic in movable_topics
            for number in self.space.ids_of_topic(topic)
            if self.origin[number] != NO_OWNER
        ]
        candidates = [n for n in newly_assigned if len(self.receivers[self.topic_of[n]]) >= 2]
        candidates += previously_held
        moved = True
        while moved:
            moved = False
            for number in candidates:
                giver = self.holder[number]
                topic = self.topic_of[number]
                previous = self.previous_owner.get(number, NO_OWNER)
                if (
                    previous != giver
                    and previous in self.receiver_sets[topic]
                    and self._improves(giver, previous)
                ):
                    self._move(giver, previous, topic, number)
                    moved = True
                    continue
                receiver = self._cheapest_receiver(topic, giver)
                if receiver != NO_OWNER and self._improves(giver, receiver):
                    self._move(giver, receiver, topic, number)
                    moved = True

    def move_along_paths(self) -> None:
        while True:
            path = self._find_improving_path()
            if path is None:
                return
            for giver, receiver, topic in path:
                self._move(giver, receiver, topic, NO_OWNER)

    def keep_most_owned(self) -> None:
        """Step 5: the counts that keep most partitions where they were (see
        `fewest_moves`), then the partitions themselves: each member first what it held
        before balancing, then what it holds now, then what it held in an older generation."""
        member_count = len(self.counts)
        held = [
            {t: len(pool) for t, pool in self.held[m].items() if pool} for m in range(member_count)
        ]
        owned: list[dict[int, int]] = [{} for _ in range(member_count)]
        for number, member in enumerate(self.origin):
            if member != NO_OWNER:
                topic = self.topic_of[number]
                owned[member][topic] = owned[member].get(topic, 0) + 1
        target = fewest_moves(held, owned, self.receivers, self.weights)
        kept = self._kept_counts()
        for topic in range(len(self.space.topics)):
            members = self.receivers[topic]
            if any(
                target[m].get(topic, 0) != held[m].get(topic, 0)
                or kept[m].get(topic, 0) < min(held[m].get(topic, 0), owned[m].get(topic, 0))
                for m in members
            ):
                self._place_topic(topic, [target[m].get(topic, 0) for m in range(member_count)])

    def assignment(self) -> list[list[int]]:
        result: list[list[int]] = [[] for _ in self.counts]
        for number, member in enumerate(self.holder):
            if member != NO_OWNER:
                result[member].append(number)
        return result

    # -- helpers ------------------------------------------------------------------------------

    def _kept_counts(self) -> list[dict[int, int]]:
        """Per member and topic: how many partitions it holds that it held before balancing."""
        kept: list[dict[int, int]] = [{} for _ in self.counts]
        for number, member in enumerate(self.holder):
            if member != NO_OWNER and self.origin[number] == member:
                topic = self.topic_of[number]
                kept[member][topic] = kept[member].get(topic, 0) + 1
        return kept

    def _place_topic(self, topic: int, wanted: Sequence[int]) -> None:
        """Hand out the topic's partitions so that member m gets `wanted[m]`, keeping as
        many partitions with the member that held them before balancing as possible."""
        numbers = self.space.ids_of_topic(topic)
        current = {n: self.holder[n] for n in numbers}
        for member in {m for m in current.values() if m != NO_OWNER}:
            self.counts[member] -= len(self.held[member].get(topic, ()))
            self.held[member][topic] = set()
        room = list(wanted)
        placed: dict[int, int] = {}
        origin, previous_owner = self.origin, self.previous_owner

        def preferred(number: int, round_: int) -> int:
            if round_ == 0:  # still where it was before balancing
                return origin[number] if current[number] == origin[number] else NO_OWNER
            if round_ == 1:  # back to where it was before balancing
                return origin[number]
            if round_ == 2:  # where balancing put it
                return current[number]
            return previous_owner.get(number, NO_OWNER)  # its owner in an older generation

        for round_ in range(4):
            for number in numbers:
                member = preferred(number, round_)
                if number not in placed and member != NO_OWNER and room[member] > 0:
                    placed[number] = member
                    room[member] -= 1
        members_with_room = (m for m in range(len(room)) for _ in range(room[m]))
        for number in numbers:
            if number not in placed:
                placed[number] = next(members_with_room)
        for number, member in placed.items():
            self._take(number, member)

    def _improves(self, giver: int, receiver: int) -> bool:
        """Whether moving one partition from giver to receiver lowers the potential."""
        counts, weights = self.counts, self.weights
        return (2 * counts[receiver] + 1) * weights[giver] < (2 * counts[giver] - 1) * weights[
            receiver
        ]

    def _cheaper(self, member: int, than: int) -> bool:
        """Whether receiving one partition raises the potential less for member than for
        `than` (ties go to the earlier member)."""
        counts, weights = self.counts, self.weights
        left = (2 * counts[member] + 1) * weights[than]
        right = (2 * counts[than] + 1) * weights[member]
        return left < right or (left == right and member < than)

    def _saving_order(self, member: int) -> tuple[int, Fraction, int]:
        """Sort key: members whose giving one partition lowers the potential most first."""
        weight = self.weights[member]
        if weight == 0:
            return (0, Fraction(-self.counts[member]), member)
        return (1, -Fraction(2 * self.counts[member] - 1, weight), member)

    def _cheapest_receiver(self, topic: int, excluded: int) -> int:
        best = NO_OWNER
        for member in self.receivers[topic]:
            if member != excluded and (best == NO_OWNER or self._cheaper(member, best)):
                best = member
        return best

    def _take(self, number: int, member: int) -> None:
        self.holder[number] = member
        self.counts[member] += 1
        self.held[member].setdefault(self.topic_of[number], set()).add(number)

    def _move(self, giver: int, receiver: int, topic: int, preferred: int) -> None:
        pool = self.held[giver][topic]
        origin = self.origin

        def stickiness_cost(number: int) -> tuple[int, int, int]:
            owner_before = origin[number]
            rank = 0 if owner_before == receiver else (2 if owner_before == giver else 1)
            return (rank, 0 if number == preferred else 1, number)

        number = min(pool, key=stickiness_cost)
        pool.remove(number)
        self.counts[giver] -= 1
        self._take(number, receiver)

    def _find_improving_path(self) -> list[tuple[int, int, int]] | None:
        """A chain giver -> ... -> receiver of single-partition moves (each along a topic
        the next member subscribes to) that lowers the potential, or None."""
        counts, weights = self.counts, self.weights
        receivers_anywhere = [m for m in range(len(counts)) if weights[m] > 0]
        if not receivers_anywhere:
            return None
        cheapest_anywhere = receivers_anywhere[0]
        for member in receivers_anywhere:
            if self._cheaper(member, cheapest_anywhere):
                cheapest_anywhere = member
        givers = sorted((m for m in range(len(counts)) if counts[m] > 0), key=self._saving_order)
        for giver in givers:
            if not self._improves(giver, cheapest_anywhere):
                # Givers come in decreasing order of what giving one partition saves, so if
                # the cheapest receiver of all does not help this one, it helps nobody after.
                break
            path = self._best_path_from(giver)
            if path is not None:
                return path
        return None

    def _best_path_from(self, giver: int) -> list[tuple[int, int, int]] | None:
        parent: dict[int, tuple[int, int]] = {giver: (NO_OWNER, NO_OWNER)}
        queue = deque([giver])
        best = NO_OWNER
        while queue:
            member = queue.popleft()
            for topic, pool in self.held[member].items():
                if not pool:
                    continue
                for receiver in self.receivers[topic]:
                    if receiver in parent:
                        continue
                    parent[receiver] = (member, topic)
                    queue.append(receiver)
                    if best == NO_OWNER or self._cheaper(receiver, best):
                        best = receiver
        if best == NO_OWNER or not self._improves(giver, best):
            return None
        path: list[tuple[int, int, int]] = []
        member = best
        while member != giver:
            previous, topic = parent[member]
            path.append((previous, member, topic))
            member = previous
        path.reverse()
        return path
