"""What a member checks in the assignment its leader sent, before acting on it.

The leader is another process, possibly buggy or hostile, and the coordinator does not
read assignments. A member only takes partitions of topics it subscribed to, that exist
in the coordinator's topic metadata, with a partition number inside the topic's count.
(Kafka's consumer checks the subscription the same way and rejoins on a mismatch.)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from coordinator.protocol import Assignment


def assignment_problem(
    assignment: Assignment, subscribed: Collection[str], partitions_per_topic: Mapping[str, int]
) -> str | None:
    """Why `assignment` cannot be taken, or None when every partition is valid."""
    for tp in assignment.partitions:
        if tp.topic not in subscribed:
            return (
                f"partition {tp.topic}-{tp.partition} of a topic this member did not subscribe to"
            )
        count = partitions_per_topic.get(tp.topic)
        if count is None:
            return f"partition {tp.topic}-{tp.partition} of a topic the coordinator does not know"
        if not 0 <= tp.partition < count:
            return f"partition {tp.topic}-{tp.partition} outside the topic's 0..{count - 1}"
    if len(set(assignment.partitions)) != len(assignment.partitions):
        return "the same partition twice"
    return None
