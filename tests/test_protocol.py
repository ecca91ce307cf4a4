"""Consumer protocol bytes: hand-computed vectors, Kafka's ordering rules, and fuzzing."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.protocol import (
    Assignment,
    ProtocolError,
    StickyUserData,
    Subscription,
    TopicPartition,
    decode_assignment,
    decode_cooperative_sticky_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_cooperative_sticky_user_data,
    encode_sticky_user_data,
    encode_subscription,
    subscription_version,
)

TP = TopicPartition

# Topics deliberately out of order and owned partitions unsorted, so the vectors show
# the encoder's sorting and grouping.
EXAMPLE_SUBSCRIPTION = Subscription(
    topics=("b", "a"),
    user_data=b"\x01",
    owned_partitions=(TP("a", 1), TP("a", 0), TP("b", 2)),
    generation_id=7,
    rack_id="r1",
    group_instance_id="not-on-the-wire",
)

# Byte by byte, from the format: int16 version, [string] topics, nullable bytes user data,
# v1+ [topic [int32]] owned partitions, v2+ int32 generation, v3+ nullable string rack.
_TOPICS_A_B = "00000002 0001 61 0001 62"  # sorted: "a" before "b"
_USER_DATA_01 = "00000001 01"
# Grouped per topic, sorted by (topic, partition): a -> [0, 1], b -> [2].
_OWNED_A01_B2 = "00000002 0001 61 00000002 00000000 00000001 0001 62 00000001 00000002"
_GENERATION_7 = "00000007"
_RACK_R1 = "0002 7231"

SUBSCRIPTION_VECTORS = {
    0: f"0000 {_TOPICS_A_B} {_USER_DATA_01}",
    1: f"0001 {_TOPICS_A_B} {_USER_DATA_01} {_OWNED_A01_B2}",
    2: f"0002 {_TOPICS_A_B} {_USER_DATA_01} {_OWNED_A01_B2} {_GENERATION_7}",
    3: f"0003 {_TOPICS_A_B} {_USER_DATA_01} {_OWNED_A01_B2} {_GENERATION_7} {_RACK_R1}",
}

EXAMPLE_ASSIGNMENT = Assignment(partitions=(TP("b", 2), TP("a", 0), TP("b", 1)), user_data=None)
# Grouped per topic in order of first appearance (b, then a), partition order as given.
_ASSIGNED_B21_A0 = "00000002 0001 62 00000002 00000002 00000001 0001 61 00000001 00000000"
_NULL_BYTES = "ffffffff"


def hex_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


# ---------------------------------------------------------------------------------------
# Subscription vectors


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_encode_subscription_matches_hand_computed_bytes(version: int) -> None:
    assert (
        encode_subscription(EXAMPLE_SUBSCRIPTION, version).hex()
        == hex_bytes(SUBSCRIPTION_VECTORS[version]).hex()
    )


def test_encode_subscription_defaults_to_version_3() -> None:
    assert encode_subscription(EXAMPLE_SUBSCRIPTION) == hex_bytes(SUBSCRIPTION_VECTORS[3])


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (0, Subscription(topics=("a", "b"), user_data=b"\x01")),
        (
            1,
            Subscription(
                topics=("a", "b"),
                user_data=b"\x01",
                owned_partitions=(TP("a", 0), TP("a", 1), TP("b", 2)),
            ),
        ),
        (
            2,
            Subscription(
                topics=("a", "b"),
                user_data=b"\x01",
                owned_partitions=(TP("a", 0), TP("a", 1), TP("b", 2)),
                generation_id=7,
            ),
        ),
        (
            3,
            Subscription(
                topics=("a", "b"),
                user_data=b"\x01",
                owned_partitions=(TP("a", 0), TP("a", 1), TP("b", 2)),
                generation_id=7,
                rack_id="r1",
            ),
        ),
    ],
)
def test_decode_subscription_vectors_with_defaults_for_older_versions(
    version: int, expected: Subscription
) -> None:
    decoded = decode_subscription(hex_bytes(SUBSCRIPTION_VECTORS[version]))
    assert decoded == expected
    assert decoded.group_instance_id is None
    assert all(type(tp) is TopicPartition for tp in decoded.owned_partitions)


def test_subscription_with_null_user_data_and_no_topics() -> None:
    empty = Subscription(topics=())
    assert encode_subscription(empty, 0) == hex_bytes("0000 00000000 ffffffff")
    assert encode_subscription(empty, 3) == hex_bytes(
        "0003 00000000 ffffffff 00000000 ffffffff ffff"
    )
    assert decode_subscription(encode_subscription(empty, 3)) == empty


def test_empty_user_data_is_not_null() -> None:
    sub = Subscription(topics=("t",), user_data=b"")
    assert encode_subscription(sub, 0) == hex_bytes("0000 00000001 0001 74 00000000")
    assert decode_subscription(encode_subscription(sub, 0)).user_data == b""


def test_group_instance_id_is_not_encoded() -> None:
    without_id = dataclasses.replace(EXAMPLE_SUBSCRIPTION, group_instance_id=None)
    assert encode_subscription(EXAMPLE_SUBSCRIPTION) == encode_subscription(without_id)


def test_empty_rack_id_decodes_as_no_rack_like_kafka() -> None:
    data = encode_subscription(Subscription(topics=("t",), rack_id=""))
    assert data.endswith(hex_bytes("0000"))
    assert decode_subscription(data).rack_id is None


def test_topics_sort_in_java_utf16_order() -> None:
    # U+10000 is the surrogate pair D800 DC00 in UTF-16, which Java sorts before U+FFFF;
    # Python's code-point order would put it after.
    supplementary, last_bmp = "\U00010000", "\uffff"
    data = encode_subscription(Subscription(topics=(last_bmp, supplementary)), 0)
    assert data == hex_bytes("0000 00000002 0004 f0908080 0003 efbfbf ffffffff")


def test_owned_partitions_sort_by_topic_then_signed_partition() -> None:
    owned = (TP("b", 0), TP("a", 5), TP("a", -1), TP("b", -3))
    data = encode_subscription(Subscription(topics=(), owned_partitions=owned), 1)
    assert data == hex_bytes(
        "0001 00000000 ffffffff 00000002"
        " 0001 61 00000002 ffffffff 00000005"
        " 0001 62 00000002 fffffffd 00000000"
    )


def test_duplicate_owned_partitions_are_kept() -> None:
    owned = (TP("a", 1), TP("a", 1))
    decoded = decode_subscription(encode_subscription(Subscription((), owned_partitions=owned)))
    assert decoded.owned_partitions == owned


# ---------------------------------------------------------------------------------------
# Versions: forward compatibility, old readers, version probing


def test_future_version_decodes_with_v3_format_ignoring_trailing_bytes() -> None:
    v3 = hex_bytes(SUBSCRIPTION_VECTORS[3])
    v4 = b"\x00\x04" + v3[2:] + b"\x00\x03new\xff\xff\xff\xff"
    assert subscription_version(v4) == 4
    assert decode_subscription(v4) == decode_subscription(v3)


def test_much_newer_version_is_still_parsed() -> None:
    v3 = hex_bytes(SUBSCRIPTION_VECTORS[3])
    assert decode_subscription(b"\x7f\xff" + v3[2:] + b"junk") == decode_subscription(v3)


def test_old_reader_of_newer_bytes_ignores_the_fields_it_does_not_know() -> None:
    # Kafka's deserializeNewSubscriptionWithOldVersion: v3 bytes read as v0.
    as_v0 = b"\x00\x00" + hex_bytes(SUBSCRIPTION_VECTORS[3])[2:]
    assert decode_subscription(as_v0) == Subscription(topics=("a", "b"), user_data=b"\x01")


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4, 32767])
def test_subscription_version_reads_the_header_only(version: int) -> None:
    assert subscription_version(version.to_bytes(2, "big") + b"anything") == version


@pytest.mark.parametrize("version", [-1, 4, 100])
def test_encoding_an_unknown_version_is_refused(version: int) -> None:
    with pytest.raises(ValueError, match="version"):
        encode_subscription(EXAMPLE_SUBSCRIPTION, version)
    with pytest.raises(ValueError, match="version"):
        encode_assignment(EXAMPLE_ASSIGNMENT, version)


@pytest.mark.parametrize(
    "sub",
    [
        Subscription(topics=(), owned_partitions=(TP("t", 2**31),)),
        Subscription(topics=(), generation_id=-(2**31) - 1),
        Subscription(topics=("x" * 0x8000,)),
        Subscription(topics=(), rack_id="é" * 0x4000),
    ],
)
def test_encoding_values_that_do_not_fit_raises_value_error(sub: Subscription) -> None:
    with pytest.raises(ValueError, match=r"int32|UTF-8 bytes"):
        encode_subscription(sub)


def test_longest_topic_name_fits() -> None:
    sub = Subscription(topics=("x" * 0x7FFF,))
    assert decode_subscription(encode_subscription(sub)) == sub


# ---------------------------------------------------------------------------------------
# Assignment vectors


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_vectors_are_the_same_in_every_version(version: int) -> None:
    expected = hex_bytes(f"{version:04x} {_ASSIGNED_B21_A0} {_NULL_BYTES}")
    assert encode_assignment(EXAMPLE_ASSIGNMENT, version) == expected
    grouped = (TP("b", 2), TP("b", 1), TP("a", 0))
    assert decode_assignment(expected) == Assignment(partitions=grouped, user_data=None)


def test_assignment_with_user_data_and_no_partitions() -> None:
    data = hex_bytes("0003 00000000 00000002 cafe")
    assert encode_assignment(Assignment(partitions=(), user_data=b"\xca\xfe")) == data
    assert decode_assignment(data) == Assignment(partitions=(), user_data=b"\xca\xfe")


def test_assignment_decodes_partitions_in_wire_order() -> None:
    decoded = decode_assignment(hex_bytes(f"0000 {_ASSIGNED_B21_A0} {_NULL_BYTES}"))
    assert decoded.partitions == (TP("b", 2), TP("b", 1), TP("a", 0))
    assert all(type(tp) is TopicPartition for tp in decoded.partitions)


def test_future_assignment_version_ignores_trailing_bytes() -> None:
    v4 = hex_bytes(f"0004 {_ASSIGNED_B21_A0} 00000001 07 0001 ffff 0003 666f6f")
    assert decode_assignment(v4) == Assignment((TP("b", 2), TP("b", 1), TP("a", 0)), b"\x07")


# ---------------------------------------------------------------------------------------
# Malformed input: precise ProtocolErrors


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("", "at byte 0: truncated version: needs 2 bytes, only 0 left"),
        ("00", "at byte 0: truncated version: needs 2 bytes, only 1 left"),
        ("ffff", "at byte 0: unsupported version -1"),
        ("8000 00000000 ffffffff", "at byte 0: unsupported version -32768"),
        ("0000 000000", "at byte 2: truncated topics count: needs 4 bytes, only 3 left"),
        ("0000 ffffffff", "at byte 2: negative topics count -1 (the null marker)"),
        ("0000 fffffff0", "at byte 2: negative topics count -16"),
        ("0000 7fffffff 0000", "at byte 2: topics count 2147483647 needs at least 4294967294"),
        ("0000 00000001 ffff ffffffff", "at byte 6: topics has negative length -1"),
        ("0000 00000001 0005 6162", "at byte 8: truncated topics: needs 5 bytes, only 2 left"),
        ("0000 00000001 0002 61ff ffffffff", "at byte 9: topics is not valid UTF-8"),
        ("0000 00000001 00", "at byte 2: topics count 1 needs at least 2 bytes, only 1 left"),
        ("0000 00000002 0001 61 00", "at byte 9: truncated topics length: needs 2 bytes, only 1"),
        ("0000 00000000 fffffffe", "at byte 6: user_data has negative length -2"),
        ("0000 00000000 00000005 0102", "at byte 10: truncated user_data: needs 5 bytes"),
        ("0000 00000000", "at byte 6: truncated user_data length"),
        ("0001 00000000 ffffffff", "at byte 10: truncated owned_partitions count"),
        (
            "0001 00000000 ffffffff 00000001 0001 61 ffffffff",
            "at byte 17: negative owned_partitions partitions count -1 (the null marker)",
        ),
        (
            "0001 00000000 ffffffff 00000001 0001 61 00000002 00000001",
            "at byte 17: owned_partitions partitions count 2 needs at least 8 bytes, only 4 left",
        ),
        (
            "0001 00000000 ffffffff 00000001 fffe 00000000",
            "at byte 14: owned_partitions topic has negative length -2",
        ),
        (
            "0001 00000000 ffffffff 00000001 0001 c3 00000000",
            "at byte 16: owned_partitions topic is not valid UTF-8",
        ),
        ("0002 00000000 ffffffff 00000000 0000", "at byte 14: truncated generation_id"),
        ("0003 00000000 ffffffff 00000000 00000001", "at byte 18: truncated rack_id length"),
        ("0003 00000000 ffffffff 00000000 00000001 fffe", "at byte 18: rack_id has negative"),
        ("0003 00000000 ffffffff 00000000 00000001 0003 7231", "at byte 20: truncated rack_id"),
    ],
)
def test_malformed_subscription_raises_protocol_error_saying_what_and_where(
    data: str, message: str
) -> None:
    with pytest.raises(ProtocolError) as raised:
        decode_subscription(hex_bytes(data))
    assert f"invalid subscription {message}" in str(raised.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("0000", "at byte 2: truncated assigned_partitions count"),
        (
            "0000 00000001 0001 61 7fffffff",
            "at byte 9: assigned_partitions partitions count 2147483647",
        ),
        ("0000 00000000", "at byte 6: truncated user_data length"),
        ("ff00 00000000 ffffffff", "at byte 0: unsupported version -256"),
    ],
)
def test_malformed_assignment_raises_protocol_error(data: str, message: str) -> None:
    with pytest.raises(ProtocolError, match=f"invalid assignment {message}"):
        decode_assignment(hex_bytes(data))


def test_protocol_error_is_a_value_error() -> None:
    assert issubclass(ProtocolError, ValueError)


# ---------------------------------------------------------------------------------------
# Round trips and fuzzing

topics_st = st.text(max_size=12)
int32_st = st.integers(min_value=-(2**31), max_value=2**31 - 1)
user_data_st = st.none() | st.binary(max_size=24)
partitions_st = st.lists(st.builds(TopicPartition, topics_st, int32_st), max_size=12)
subscriptions_st = st.builds(
    Subscription,
    topics=st.lists(topics_st, max_size=8).map(tuple),
    user_data=user_data_st,
    owned_partitions=partitions_st.map(tuple),
    generation_id=int32_st,
    rack_id=st.none() | st.text(max_size=8),
    group_instance_id=st.none() | st.text(max_size=8),
)
assignments_st = st.builds(Assignment, partitions=partitions_st.map(tuple), user_data=user_data_st)
versions_st = st.integers(min_value=0, max_value=3)


def java_order(text: str) -> bytes:
    return text.encode("utf-16-be")


def grouped_by_first_appearance(
    partitions: tuple[TopicPartition, ...],
) -> tuple[TopicPartition, ...]:
    first_seen: dict[str, int] = {}
    for topic, _ in partitions:
        first_seen.setdefault(topic, len(first_seen))
    return tuple(sorted(partitions, key=lambda tp: first_seen[tp.topic]))


def as_decoded(sub: Subscription, version: int) -> Subscription:
    """What a round trip at ``version`` yields: Kafka's order, and only that version's fields."""
    return Subscription(
        topics=tuple(sorted(sub.topics, key=java_order)),
        user_data=sub.user_data,
        owned_partitions=tuple(
            sorted(sub.owned_partitions, key=lambda tp: (java_order(tp.topic), tp.partition))
        )
        if version >= 1
        else (),
        generation_id=sub.generation_id if version >= 2 else -1,
        rack_id=(sub.rack_id or None) if version >= 3 else None,
    )


@given(subscriptions_st, versions_st)
def test_subscription_round_trips_at_every_version(sub: Subscription, version: int) -> None:
    data = encode_subscription(sub, version)
    assert subscription_version(data) == version
    assert decode_subscription(data) == as_decoded(sub, version)


@given(assignments_st, versions_st)
def test_assignment_round_trips_at_every_version(assignment: Assignment, version: int) -> None:
    decoded = decode_assignment(encode_assignment(assignment, version))
    assert decoded == Assignment(
        grouped_by_first_appearance(assignment.partitions), assignment.user_data
    )


DECODERS: list[Callable[[bytes], object]] = [
    decode_subscription,
    decode_assignment,
    subscription_version,
    decode_sticky_user_data,
    decode_cooperative_sticky_user_data,
]


def decodes_or_raises_protocol_error(data: bytes) -> None:
    for decode in DECODERS:
        try:
            decode(data)
        except ProtocolError as error:
            assert " at byte " in str(error)


@given(st.binary(max_size=256))
def test_arbitrary_bytes_decode_or_raise_protocol_error(data: bytes) -> None:
    decodes_or_raises_protocol_error(data)


@given(st.integers(min_value=0, max_value=3), st.binary(max_size=64))
def test_plausible_headers_with_garbage_decode_or_raise_protocol_error(
    version: int, body: bytes
) -> None:
    decodes_or_raises_protocol_error(version.to_bytes(2, "big") + body)


@given(subscriptions_st, versions_st, st.data())
def test_every_truncated_subscription_raises_protocol_error(
    sub: Subscription, version: int, data: st.DataObject
) -> None:
    encoded = encode_subscription(sub, version)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(ProtocolError, match="at byte"):
        decode_subscription(encoded[:cut])


@given(assignments_st, versions_st, st.data())
def test_every_truncated_assignment_raises_protocol_error(
    assignment: Assignment, version: int, data: st.DataObject
) -> None:
    encoded = encode_assignment(assignment, version)
    cut = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
    with pytest.raises(ProtocolError, match="at byte"):
        decode_assignment(encoded[:cut])


@given(subscriptions_st, assignments_st, st.data())
def test_mutated_encodings_decode_or_raise_protocol_error(
    sub: Subscription, assignment: Assignment, data: st.DataObject
) -> None:
    for encoded in (encode_subscription(sub), encode_assignment(assignment)):
        mutated = bytearray(encoded)
        for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
            index = data.draw(st.integers(min_value=0, max_value=len(mutated) - 1))
            mutated[index] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFE, 0xFF]))
        decodes_or_raises_protocol_error(bytes(mutated))


# ---------------------------------------------------------------------------------------
# Sticky assignor user data (KIP-341) and cooperative-sticky user data

STICKY_PARTITIONS = (TP("t", 0), TP("u", 5), TP("t", 1))
# Grouped per topic in order of first appearance: t -> [0, 1], u -> [5]; no version prefix.
_STICKY_V0 = "00000002 0001 74 00000002 00000000 00000001 0001 75 00000001 00000005"
_STICKY_GROUPED = (TP("t", 0), TP("t", 1), TP("u", 5))


def test_sticky_user_data_v0_vector() -> None:
    data = encode_sticky_user_data(STICKY_PARTITIONS, None)
    assert data == hex_bytes(_STICKY_V0)
    assert decode_sticky_user_data(data) == StickyUserData(_STICKY_GROUPED, generation=None)


def test_sticky_user_data_v1_vector_appends_the_generation() -> None:
    data = encode_sticky_user_data(STICKY_PARTITIONS, 3)
    assert data == hex_bytes(f"{_STICKY_V0} 00000003")
    assert decode_sticky_user_data(data) == StickyUserData(_STICKY_GROUPED, generation=3)


@pytest.mark.parametrize("leftover", ["", "00", "0000", "000000"])
def test_sticky_v1_reader_falls_back_to_v0_when_no_whole_generation_follows(
    leftover: str,
) -> None:
    decoded = decode_sticky_user_data(hex_bytes(f"{_STICKY_V0} {leftover}"))
    assert decoded == StickyUserData(_STICKY_GROUPED, generation=None)


def test_sticky_v1_reader_ignores_bytes_after_the_generation() -> None:
    decoded = decode_sticky_user_data(hex_bytes(f"{_STICKY_V0} ffffffff 0102"))
    assert decoded == StickyUserData(_STICKY_GROUPED, generation=-1)


def test_sticky_v0_part_of_v1_data_is_the_v0_message() -> None:
    # A v0 reader stops after the array, so v1 data is v0 data plus an ignorable int32.
    v0, v1 = (
        encode_sticky_user_data(STICKY_PARTITIONS, None),
        encode_sticky_user_data(STICKY_PARTITIONS, 9),
    )
    assert v1[: len(v0)] == v0
    assert len(v1) == len(v0) + 4


@pytest.mark.parametrize("data", [None, b""])
def test_no_sticky_user_data_means_no_previous_assignment(data: bytes | None) -> None:
    assert decode_sticky_user_data(data) == StickyUserData(partitions=(), generation=None)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("000000", "at byte 0: truncated previous_assignment count"),
        ("00000001 0005 74757677", "at byte 6: truncated previous_assignment topic: needs 5"),
        ("00000001 0001 74 00000001", "at byte 7: previous_assignment partitions count 1"),
    ],
)
def test_malformed_sticky_user_data_raises_protocol_error(data: str, message: str) -> None:
    with pytest.raises(ProtocolError, match=f"invalid sticky assignor user data {message}"):
        decode_sticky_user_data(hex_bytes(data))


@given(partitions_st, st.none() | int32_st)
def test_sticky_user_data_round_trips(
    partitions: list[TopicPartition], generation: int | None
) -> None:
    decoded = decode_sticky_user_data(encode_sticky_user_data(partitions, generation))
    expected_partitions = grouped_by_first_appearance(tuple(partitions))
    if not partitions and generation is None:
        # v0 of nothing is "00000000": an empty previous assignment.
        assert decoded == StickyUserData((), None)
    else:
        assert decoded == StickyUserData(expected_partitions, generation)


@pytest.mark.parametrize(
    ("generation", "data"), [(5, "00000005"), (-1, "ffffffff"), (0, "00000000")]
)
def test_cooperative_sticky_user_data_vectors(generation: int, data: str) -> None:
    assert encode_cooperative_sticky_user_data(generation) == hex_bytes(data)
    assert decode_cooperative_sticky_user_data(hex_bytes(data)) == generation


def test_cooperative_sticky_user_data_absent_means_no_generation() -> None:
    assert decode_cooperative_sticky_user_data(None) == -1
    assert decode_cooperative_sticky_user_data(b"") == -1


def test_cooperative_sticky_user_data_ignores_trailing_bytes() -> None:
    assert decode_cooperative_sticky_user_data(hex_bytes("0000000a ff")) == 10


def test_truncated_cooperative_sticky_user_data_raises_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="at byte 0: truncated generation"):
        decode_cooperative_sticky_user_data(b"\x00\x01")


def test_cooperative_sticky_generation_must_fit_in_an_int32() -> None:
    with pytest.raises(ValueError, match="int32"):
        encode_cooperative_sticky_user_data(2**31)


@given(int32_st)
def test_cooperative_sticky_user_data_round_trips(generation: int) -> None:
    assert (
        decode_cooperative_sticky_user_data(encode_cooperative_sticky_user_data(generation))
        == generation
    )
