"""Bounds the server enforces on input, shared by the validators and the OpenAPI document."""

from __future__ import annotations

from typing import Final

# SQLite stores integers as signed 64-bit; a wider JSON number must be refused at the door,
# not fail half-way through a store write.
INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 1

# Largest request body, unless configured otherwise, or the group needs more (below).
DEFAULT_MAX_BODY_BYTES: Final = 4 * 1024 * 1024

# A group's protocol bodies grow with its size: a leader's SyncGroup carries every member's
# assignment, a commit one entry per partition. What one can need (docs/server.md has the
# arithmetic), per partition of the topic metadata and per member per topic:
#   - commit entry: {"topic":"<name>","partition":2147483647,"committed_offset":
#     9223372036854775807,"committed_metadata":null}, = 100 bytes + the name;
#   - assignment: 4 bytes per partition, twice with the sticky assignor's user data, as
#     base64 (4/3): 11 bytes; per member and topic, the name again with its 6-byte
#     header, twice, as base64: 2.7 x (name + 6);
#   - per member: its SyncGroup entry's JSON and member id, 400 bytes.
BODY_BYTES_PER_PARTITION: Final = 120
BODY_BYTES_PER_MEMBER: Final = 400
# The most a derived limit grants, whatever the group's size.
MAX_DERIVED_BODY_BYTES: Final = 256 * 1024 * 1024


def group_body_limit(configured: int, members: int, partitions_per_topic: dict[str, int]) -> int:
    """The body limit for a request on one group: the configured limit, or what the group
    can legitimately need if that is more (at most MAX_DERIVED_BODY_BYTES)."""
    needed = members * BODY_BYTES_PER_MEMBER
    for topic, partitions in partitions_per_topic.items():
        needed += partitions * (BODY_BYTES_PER_PARTITION + len(topic))
        needed += members * 3 * (len(topic) + 6)
    return max(configured, min(needed, MAX_DERIVED_BODY_BYTES))


# Journal pages: a reader pages with `since`, so one response stays bounded.
JOURNAL_DEFAULT_LIMIT: Final = 1000
JOURNAL_MAX_LIMIT: Final = 10_000
