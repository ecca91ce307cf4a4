"""ConsumerGroupDescribe and ListGroups v5 on the wire, against bytes the Kafka 4.4 broker sent.

The bytes were captured from the test broker (`make kafka`) answering kafka-python's
encoding of the requests (a 3-member Java fleet, group.protocol=consumer, on a 6-partition
topic `cg3`; a second group id, `nope`, does not exist). No broker is needed here: this pins
the message definitions (coordinator/client/kafka_messages) and their decoding into typed
results; tests/kafka/test_consumer_protocol.py runs the same requests against the broker.
"""

from __future__ import annotations

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

from coordinator.client.kafka_groups import (
    GroupType,
    MemberType,
    consumer_group_description,
    listed_groups,
)
from coordinator.client.kafka_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)

# Response header v1 (flexible): correlation id 7, then no tagged fields.
HEADER = bytes.fromhex("0000000700")

CGD_V1_REQUEST = "02046367330000"
CGD_V1_RESPONSE = (
    "00000000020000000463673307537461626c65000000040000000408756e69666f726d041732457053714651"
    "555273694b48316b6b306a34677777046d2d3100000000040e6a6176612d706565722d6d2d310b2f3132372e"
    "302e302e31020463673301027f4f0b4ce03f4279b5e9a2f7b626ae6b04636733030000000200000003000002"
    "7f4f0b4ce03f4279b5e9a2f7b626ae6b046367330300000002000000030000010017644164364e71536a5145"
    "4b354e4246764a3659483577046d2d3000000000040e6a6176612d706565722d6d2d300b2f3132372e302e30"
    "2e31020463673301027f4f0b4ce03f4279b5e9a2f7b626ae6b046367330300000000000000010000027f4f0b"
    "4ce03f4279b5e9a2f7b626ae6b0463673303000000000000000100000100175a4f70416c663256527179385f"
    "303676426479713777046d2d3200000000040e6a6176612d706565722d6d2d320b2f3132372e302e302e3102"
    "0463673301027f4f0b4ce03f4279b5e9a2f7b626ae6b046367330300000004000000050000027f4f0b4ce03f"
    "4279b5e9a2f7b626ae6b0463673303000000040000000500000100800000000000"
)
# v0, two groups: cg3 as above (no MemberType), then `nope`: GROUP_ID_NOT_FOUND (69).
CGD_V0_REQUEST = "0304636733056e6f70650000"
CGD_V0_RESPONSE = (
    "00000000030000000463673307537461626c65000000040000000408756e69666f726d041732457053714651"
    "555273694b48316b6b306a34677777046d2d3100000000040e6a6176612d706565722d6d2d310b2f3132372e"
    "302e302e31020463673301027f4f0b4ce03f4279b5e9a2f7b626ae6b04636733030000000200000003000002"
    "7f4f0b4ce03f4279b5e9a2f7b626ae6b0463673303000000020000000300000017644164364e71536a51454b"
    "354e4246764a3659483577046d2d3000000000040e6a6176612d706565722d6d2d300b2f3132372e302e302e"
    "31020463673301027f4f0b4ce03f4279b5e9a2f7b626ae6b046367330300000000000000010000027f4f0b4c"
    "e03f4279b5e9a2f7b626ae6b04636733030000000000000001000000175a4f70416c663256527179385f3036"
    "76426479713777046d2d3200000000040e6a6176612d706565722d6d2d320b2f3132372e302e302e31020463"
    "673301027f4f0b4ce03f4279b5e9a2f7b626ae6b046367330300000004000000050000027f4f0b4ce03f4279"
    "b5e9a2f7b626ae6b04636733030000000400000005000000800000000000451647726f7570206e6f7065206e"
    "6f7420666f756e642e056e6f70650100000000000000000101800000000000"
)
LG_V5_REQUEST = "010209636f6e73756d657200"
LG_V5_RESPONSE = "000000000000020463673309636f6e73756d657207537461626c6509636f6e73756d65720000"


def test_consumer_group_describe_request_encodes_as_kafka_defines_it() -> None:
    request = ConsumerGroupDescribeRequest[1](
        group_ids=["cg3"], include_authorized_operations=False
    )
    assert request.encode().hex() == CGD_V1_REQUEST
    assert ConsumerGroupDescribeRequest.API_KEY == 69
    two = ConsumerGroupDescribeRequest[0](
        group_ids=["cg3", "nope"], include_authorized_operations=False
    )
    assert two.encode().hex() == CGD_V0_REQUEST


def test_consumer_group_describe_v1_decodes_into_a_converged_group() -> None:
    answer = ConsumerGroupDescribeResponse.decode(bytes.fromhex(CGD_V1_RESPONSE), version=1)
    [group] = answer.groups
    described = consumer_group_description(group)
    assert described.error_code == 0
    assert (described.group_id, described.state, described.assignor) == ("cg3", "Stable", "uniform")
    assert (described.group_epoch, described.assignment_epoch) == (4, 4)
    assert [m.instance_id for m in described.members] == ["m-0", "m-1", "m-2"]
    by_instance = {m.instance_id: m for m in described.members}
    assert by_instance["m-0"].assignment == (("cg3", 0), ("cg3", 1))
    assert by_instance["m-2"].target_assignment == (("cg3", 4), ("cg3", 5))
    assert by_instance["m-1"].client_id == "java-peer-m-1"
    assert {m.member_epoch for m in described.members} == {4}
    assert {m.member_type for m in described.members} == {MemberType.CONSUMER}
    assert all(m.subscribed_topics == ("cg3",) for m in described.members)
    assert described.converged and not described.migrating
    assert described.converged_members == 3


def test_consumer_group_describe_v0_has_no_member_type_and_reports_unknown_groups() -> None:
    answer = ConsumerGroupDescribeResponse.decode(bytes.fromhex(CGD_V0_RESPONSE), version=0)
    cg3, nope = (consumer_group_description(g) for g in answer.groups)
    assert cg3.converged and {m.member_type for m in cg3.members} == {MemberType.UNKNOWN}
    assert (nope.group_id, nope.error_code, nope.error_message) == (
        "nope",
        69,
        "Group nope not found.",
    )
    assert not nope.members


def test_list_groups_v5_filters_and_answers_types() -> None:
    request = ListGroupsRequest[5](states_filter=[], types_filter=["consumer"])
    assert request.encode().hex() == LG_V5_REQUEST
    answer = ListGroupsResponse.decode(bytes.fromhex(LG_V5_RESPONSE), version=5)
    [listed] = listed_groups(answer)
    assert (listed.group_id, listed.group_type, listed.state) == (
        "cg3",
        GroupType.CONSUMER,
        "Stable",
    )
    assert GroupType.parse("Classic") is GroupType.CLASSIC
    assert GroupType.parse("something-new") is GroupType.UNKNOWN
