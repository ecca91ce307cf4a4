"""Kafka's ConsumerProtocol bytes: Subscription and Assignment v0-v3, and assignor user data.

Wire formats (classic, non-flexible encoding, big-endian), byte-for-byte as Kafka's
``ConsumerProtocol`` writes them:

    Subscription => version:int16 topics:[string] user_data:nullable_bytes
                    owned_partitions:[topic:string partitions:[int32]]   (v1+)
                    generation_id:int32                                  (v2+, default -1)
                    rack_id:nullable_string                              (v3+, default null)
    Assignment   => version:int16 assigned_partitions:[topic:string partitions:[int32]]
                    user_data:nullable_bytes                             (same in v0-v3)

    string = int16 length + UTF-8; nullable_string uses length -1 for null;
    nullable_bytes = int32 length (-1 = null) + bytes; [x] = int32 count + x repeated.

Sticky assignor user data (KIP-341) has no version prefix:
    v0 => [topic:string partitions:[int32]]   v1 => v0 + generation:int32
Cooperative-sticky user data is a bare int32 generation.

Decoding never raises anything but ``ProtocolError`` for malformed bytes. Like Kafka's
readers, decoders ignore bytes after the fields they know, which is how a newer version
(parsed with the newest format we know) stays readable.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Final, NamedTuple, NoReturn

HIGHEST_VERSION: Final = 3
# Kafka's DEFAULT_GENERATION: no generation known.
NO_GENERATION: Final = -1

_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_NULL_LENGTH: Final = -1
_MAX_STRING_BYTES: Final = 0x7FFF
# Smallest encodings, used to reject counts the remaining bytes cannot hold before
# allocating anything for them.
_MIN_STRING_SIZE: Final = _INT16.size
_MIN_TOPIC_PARTITIONS_SIZE: Final = _INT16.size + _INT32.size


class ProtocolError(ValueError):
    """Bytes that are not a valid consumer-protocol message."""


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    # Not on the wire in the subscription: filled from the JoinGroup member list.
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


@dataclass(frozen=True, slots=True)
class StickyUserData:
    """The sticky assignor's memory: its previous assignment and that assignment's generation."""

    partitions: tuple[TopicPartition, ...]
    # None when the sender wrote v0 (no generation field).
    generation: int | None


# ---------------------------------------------------------------------------------------
# Decoding


class _Reader:
    """A cursor over one message that turns every kind of malformed input into ProtocolError.

    Field names are passed as constant strings and only formatted into a message on error,
    keeping the per-field cost on the happy path to a struct call.
    """

    __slots__ = ("_data", "_end", "_pos", "_what")

    def __init__(self, data: bytes, what: str) -> None:
        # bytes(b) is b for real bytes, so this only copies other buffer types.
        self._data = bytes(data)
        self._end = len(self._data)
        self._pos = 0
        self._what = what

    @property
    def remaining(self) -> int:
        return self._end - self._pos

    def error(self, detail: str, offset: int) -> ProtocolError:
        return ProtocolError(f"invalid {self._what} at byte {offset}: {detail}")

    def _advance(self, size: int, field: str, part: str = "") -> int:
        start = self._pos
        if size > self._end - start:
            left = self._end - start
            raise self.error(
                f"truncated {field}{part}: needs {size} bytes, only {left} left", start
            )
        self._pos = start + size
        return start

    def int16(self, field: str, part: str = "") -> int:
        value: int = _INT16.unpack_from(self._data, self._advance(2, field, part))[0]
        return value

    def int32(self, field: str, part: str = "") -> int:
        value: int = _INT32.unpack_from(self._data, self._advance(4, field, part))[0]
        return value

    def version(self) -> int:
        version = self.int16("version")
        if version < 0:
            raise self.error(f"unsupported version {version}", 0)
        return version

    def count(self, field: str, min_element_size: int, part: str = "") -> int:
        """An array length, checked against the bytes left so a huge count cannot allocate."""
        offset = self._pos
        count = self.int32(field, f"{part} count" if part else " count")
        if count < 0:
            nullness = " (the null marker) but it is not nullable" if count == _NULL_LENGTH else ""
            raise self.error(f"negative {field}{part} count {count}{nullness}", offset)
        if count * min_element_size > self.remaining:
            raise self.error(
                f"{field}{part} count {count} needs at least {count * min_element_size} bytes, "
                f"only {self.remaining} left",
                offset,
            )
        return count

    def _utf8(self, length: int, field: str, part: str = "") -> str:
        start = self._advance(length, field, part)
        try:
            return str(self._data[start : start + length], "utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(
                f"{field}{part} is not valid UTF-8 ({exc.reason})", start + exc.start
            ) from None

    def string(self, field: str, part: str = "") -> str:
        offset = self._pos
        length = self.int16(field, f"{part} length" if part else " length")
        if length < 0:
            raise self.error(
                f"{field}{part} has negative length {length} but is not nullable", offset
            )
        return self._utf8(length, field, part)

    def nullable_string(self, field: str) -> str | None:
        offset = self._pos
        length = self.int16(field, " length")
        if length == _NULL_LENGTH:
            return None
        if length < 0:
            raise self.error(f"{field} has negative length {length}", offset)
        return self._utf8(length, field)

    def nullable_bytes(self, field: str) -> bytes | None:
        offset = self._pos
        length = self.int32(field, " length")
        if length == _NULL_LENGTH:
            return None
        if length < 0:
            raise self.error(f"{field} has negative length {length}", offset)
        start = self._advance(length, field)
        return self._data[start : start + length]

    def int32s(self, field: str, part: str = "") -> tuple[int, ...]:
        count = self.count(field, _INT32.size, part)
        start = self._advance(count * _INT32.size, field, part)
        return struct.unpack_from(f">{count}i", self._data, start)

    # The two array readers below run once per topic of every member's subscription, so
    # they inline the checks above; on anything odd they hand the element back to those
    # careful readers, which raise the precise error.

    def _reject(self, offset: int, careful_read: Callable[[], object]) -> NoReturn:
        self._pos = offset
        careful_read()
        raise AssertionError(f"fast path rejected a valid element at byte {offset}")

    def strings(self, field: str) -> tuple[str, ...]:
        count = self.count(field, _MIN_STRING_SIZE)
        data, pos, end = self._data, self._pos, self._end
        unpack_int16 = _INT16.unpack_from
        values: list[str] = []
        for _ in range(count):
            element = pos
            if pos + 2 > end:
                self._reject(element, lambda: self.string(field))
            start = pos + 2
            pos = start + unpack_int16(data, element)[0]
            if pos < start or pos > end:
                self._reject(element, lambda: self.string(field))
            try:
                values.append(data[start:pos].decode())
            except UnicodeDecodeError:
                self._reject(element, lambda: self.string(field))
        self._pos = pos
        return tuple(values)

    def topic_partitions(self, field: str) -> list[TopicPartition]:
        """[topic:string partitions:[int32]] flattened to TopicPartitions in wire order."""
        count = self.count(field, _MIN_TOPIC_PARTITIONS_SIZE)
        data, pos, end = self._data, self._pos, self._end
        unpack_int16, unpack_int32 = _INT16.unpack_from, _INT32.unpack_from

        def careful_read() -> object:
            return self.string(field, " topic"), self.int32s(field, " partitions")

        result: list[TopicPartition] = []
        append, extend, new_tuple = result.append, result.extend, tuple.__new__
        for _ in range(count):
            element = pos
            if pos + 2 > end:
                self._reject(element, careful_read)
            start = pos + 2
            pos = start + unpack_int16(data, element)[0]
            if pos < start or pos + 4 > end:
                self._reject(element, careful_read)
            try:
                topic = data[start:pos].decode()
            except UnicodeDecodeError:
                self._reject(element, careful_read)
            partition_count = unpack_int32(data, pos)[0]
            start = pos + 4
            pos = start + 4 * partition_count
            if pos < start or pos > end:
                self._reject(element, careful_read)
            # tuple.__new__ skips NamedTuple.__new__'s Python-level call (about twice as
            # fast). One partition per topic is the common shape of a balanced assignment
            # over many topics, and worth its own branch.
            if partition_count == 1:
                append(new_tuple(TopicPartition, (topic, unpack_int32(data, start)[0])))
            else:
                partitions = struct.unpack_from(f">{partition_count}i", data, start)
                extend(map(new_tuple, repeat(TopicPartition), zip(repeat(topic), partitions)))
        self._pos = pos
        return result


def subscription_version(data: bytes) -> int:
    """The version a subscription was written with (may be newer than we know, never negative)."""
    return _Reader(data, "subscription").version()


def decode_subscription(data: bytes) -> Subscription:
    """Parse a subscription; versions newer than 3 are read with the v3 format."""
    reader = _Reader(data, "subscription")
    version = reader.version()
    topics = reader.strings("topics")
    user_data = reader.nullable_bytes("user_data")
    owned: tuple[TopicPartition, ...] = ()
    generation_id = NO_GENERATION
    rack_id = None
    if version >= 1:
        owned = tuple(reader.topic_partitions("owned_partitions"))
    if version >= 2:
        generation_id = reader.int32("generation_id")
    if version >= 3:
        # Kafka treats an empty rack id as no rack id.
        rack_id = reader.nullable_string("rack_id") or None
    return Subscription(
        topics=topics,
        user_data=user_data,
        owned_partitions=owned,
        generation_id=generation_id,
        rack_id=rack_id,
    )


def decode_subscription_topics(data: bytes) -> tuple[str, ...]:
    """Only a subscription's topics (they come first in every version): what the coordinator
    reads, without the cost of owned partitions and user data."""
    reader = _Reader(data, "subscription")
    reader.version()
    return tuple(reader.strings("topics"))


def decode_assignment(data: bytes) -> Assignment:
    """Parse an assignment; all versions share one format, newer ones may append fields."""
    reader = _Reader(data, "assignment")
    reader.version()
    partitions = tuple(reader.topic_partitions("assigned_partitions"))
    user_data = reader.nullable_bytes("user_data")
    return Assignment(partitions=partitions, user_data=user_data)


def decode_sticky_user_data(data: bytes | None) -> StickyUserData:
    """Parse sticky assignor user data as v1, falling back to v0 as Kafka's StickyAssignor does.

    No user data (None or empty) means no previous assignment, as in Kafka.
    """
    if not data:
        return StickyUserData(partitions=(), generation=None)
    reader = _Reader(data, "sticky assignor user data")
    partitions = tuple(reader.topic_partitions("previous_assignment"))
    # v1 parses iff a whole int32 follows the array; otherwise the v0 reading stands and,
    # like Kafka's schema reader, ignores the leftover bytes.
    generation = reader.int32("generation") if reader.remaining >= _INT32.size else None
    return StickyUserData(partitions=partitions, generation=generation)


def decode_cooperative_sticky_user_data(data: bytes | None) -> int:
    """The generation in cooperative-sticky user data; -1 when there is no user data."""
    if not data:
        return NO_GENERATION
    return _Reader(data, "cooperative-sticky user data").int32("generation")


# ---------------------------------------------------------------------------------------
# Encoding


def _check_version(version: int) -> None:
    if not 0 <= version <= HIGHEST_VERSION:
        raise ValueError(f"cannot encode consumer protocol version {version}: only 0..3")


def _int32(value: int, field: str) -> bytes:
    try:
        return _INT32.pack(value)
    except struct.error:
        raise ValueError(f"{field} {value!r} does not fit in an int32") from None


def _string_too_long(field: str, encoded: bytes) -> ValueError:
    return ValueError(f"{field} is {len(encoded)} UTF-8 bytes; the limit is {_MAX_STRING_BYTES}")


def _string(value: str, field: str) -> bytes:
    encoded = value.encode()
    if len(encoded) > _MAX_STRING_BYTES:
        raise _string_too_long(field, encoded)
    return _INT16.pack(len(encoded)) + encoded


def _nullable_string(value: str | None, field: str) -> bytes:
    return _INT16.pack(_NULL_LENGTH) if value is None else _string(value, field)


def _nullable_bytes(value: bytes | None) -> bytes:
    if value is None:
        return _INT32.pack(_NULL_LENGTH)
    return _INT32.pack(len(value)) + bytes(value)


def _strings(values: Sequence[str], field: str) -> bytes:
    return _INT32.pack(len(values)) + b"".join([_string(value, field) for value in values])


def _group_by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Partitions per topic; dicts keep the order in which topics first appear."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in partitions:
        numbers = grouped.get(topic)
        if numbers is None:
            grouped[topic] = [partition]
        else:
            numbers.append(partition)
    return grouped


def _topic_partitions(partitions: Iterable[TopicPartition], field: str) -> bytes:
    grouped = _group_by_topic(partitions)
    parts = [_INT32.pack(len(grouped))]
    append, pack_int16, pack_int32 = parts.append, _INT16.pack, _INT32.pack
    # Inlined _string and int32 packing: the leader runs this for every partition of
    # every member's assignment.
    for topic, numbers in grouped.items():
        encoded = topic.encode()
        if len(encoded) > _MAX_STRING_BYTES:
            raise _string_too_long(f"{field} topic", encoded)
        append(pack_int16(len(encoded)))
        append(encoded)
        append(pack_int32(len(numbers)))
        try:
            append(pack_int32(numbers[0]) if len(numbers) == 1 else _pack_int32s(numbers))
        except struct.error:
            raise ValueError(
                f"a {field} partition of {topic!r} is not an int32: {numbers}"
            ) from None
    return b"".join(parts)


def _pack_int32s(values: Sequence[int]) -> bytes:
    return struct.pack(f">{len(values)}i", *values)


def _java_string_order(value: str) -> bytes:
    # Java's String.compareTo compares UTF-16 code units; big-endian UTF-16 bytes compare
    # the same way, which differs from Python's code-point order above U+FFFF.
    return value.encode("utf-16-be", "surrogatepass")


def _owned_partition_order(tp: TopicPartition) -> tuple[bytes, int]:
    return _java_string_order(tp.topic), tp.partition


def _code_point_order_is_java_order(topics: Iterable[str]) -> bool:
    # str.isascii() is O(1) in CPython, so this keeps the common case a plain sort.
    return all(topic.isascii() for topic in topics)


def _sorted_topics(topics: Iterable[str]) -> list[str]:
    ordered = sorted(topics)
    if _code_point_order_is_java_order(ordered):
        return ordered
    return sorted(ordered, key=_java_string_order)


def _sorted_partitions(partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    ordered = sorted(partitions)
    if _code_point_order_is_java_order(topic for topic, _ in ordered):
        return ordered
    return sorted(ordered, key=_owned_partition_order)


def encode_subscription(sub: Subscription, version: int = HIGHEST_VERSION) -> bytes:
    """Kafka's serializeSubscription: topics sorted, owned partitions sorted and grouped.

    Fields that ``version`` does not have are dropped; ``group_instance_id`` is never
    encoded (the JoinGroup request carries it).
    """
    _check_version(version)
    parts = [
        _INT16.pack(version),
        _strings(_sorted_topics(sub.topics), "topic"),
        _nullable_bytes(sub.user_data),
    ]
    if version >= 1:
        owned = _sorted_partitions(sub.owned_partitions)
        parts.append(_topic_partitions(owned, "owned_partitions"))
    if version >= 2:
        parts.append(_int32(sub.generation_id, "generation_id"))
    if version >= 3:
        parts.append(_nullable_string(sub.rack_id, "rack_id"))
    return b"".join(parts)


def encode_assignment(assignment: Assignment, version: int = HIGHEST_VERSION) -> bytes:
    """Kafka's serializeAssignment: partitions grouped per topic in order of first appearance."""
    _check_version(version)
    return b"".join(
        [
            _INT16.pack(version),
            _topic_partitions(assignment.partitions, "assigned_partitions"),
            _nullable_bytes(assignment.user_data),
        ]
    )


def encode_sticky_user_data(partitions: Sequence[TopicPartition], generation: int | None) -> bytes:
    """Sticky assignor user data: v1 when ``generation`` is given, v0 otherwise.

    Partitions are grouped per topic in order of first appearance (Kafka groups them in a
    HashMap, so its topic order is unspecified and any order reads back the same).
    """
    encoded = _topic_partitions(partitions, "previous_assignment")
    if generation is None:
        return encoded
    return encoded + _int32(generation, "generation")


def encode_cooperative_sticky_user_data(generation: int) -> bytes:
    return _int32(generation, "generation")


__all__ = [
    "HIGHEST_VERSION",
    "NO_GENERATION",
    "Assignment",
    "ProtocolError",
    "StickyUserData",
    "Subscription",
    "TopicPartition",
    "decode_assignment",
    "decode_cooperative_sticky_user_data",
    "decode_sticky_user_data",
    "decode_subscription",
    "encode_assignment",
    "encode_cooperative_sticky_user_data",
    "encode_sticky_user_data",
    "encode_subscription",
    "subscription_version",
]
