"""The route table: every operation the server has, in one place.

`app.create_app` routes these and `openapi.build_openapi` documents these, so the two
cannot disagree.
"""

from __future__ import annotations

from typing import Final

from coordinator.messages import (
    DescribedGroup,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from coordinator.server import admin_api, member_api, standby_api, system_api
from coordinator.server.http_errors import ErrorBody
from coordinator.server.limits import INT_MAX, JOURNAL_DEFAULT_LIMIT, JOURNAL_MAX_LIMIT
from coordinator.server.models import (
    DeleteGroupResult,
    ExpectedMembers,
    ExpectedMembersRequest,
    GroupList,
    JournalPage,
    LagFigure,
    Status,
    TopicMetadata,
)
from coordinator.server.operations import Access, Operation, QueryParam
from coordinator.standby import (
    PromoteRequest,
    PromoteResponse,
    StandbyHeartbeatRequest,
    StandbyHeartbeatResponse,
    StandbyList,
)

GROUP_PATH: Final = "/v1/groups/{group_id}"

_MEMBER = "member protocol"
_ADMIN = "admin"
_SYSTEM = "operations"
_AUTOSCALING = "autoscaling"

OPERATIONS: Final[tuple[Operation, ...]] = (
    Operation(
        "joinGroup",
        "POST",
        GROUP_PATH + "/join",
        member_api.join_group,
        Access.GROUP,
        "JoinGroup (long poll)",
        _MEMBER,
        description=(
            "Answers when the group's join phase completes, which can take up to the "
            "rebalance timeout (and the initial rebalance delay for a new group). Clients "
            "should wait rebalance_timeout_ms plus a margin. An answer that makes the caller "
            "a member (NONE, or MEMBER_ID_REQUIRED) carries its leave key in the "
            "Staticfleet-Member-Key header."
        ),
        request_body=JoinGroupRequest,
        response_body=JoinGroupResponse,
    ),
    Operation(
        "syncGroup",
        "POST",
        GROUP_PATH + "/sync",
        member_api.sync_group,
        Access.GROUP,
        "SyncGroup (followers wait for the leader's assignment)",
        _MEMBER,
        request_body=SyncGroupRequest,
        response_body=SyncGroupResponse,
    ),
    Operation(
        "heartbeat",
        "POST",
        GROUP_PATH + "/heartbeat",
        member_api.heartbeat,
        Access.GROUP,
        "Heartbeat",
        _MEMBER,
        request_body=HeartbeatRequest,
        response_body=HeartbeatResponse,
    ),
    Operation(
        "leaveGroup",
        "POST",
        GROUP_PATH + "/leave",
        member_api.leave_group,
        Access.GROUP,
        "LeaveGroup",
        _MEMBER,
        description=(
            "With a member token: exactly one member, identified by its member id, with that "
            "member's leave key (from its JoinGroup answer) in the Staticfleet-Member-Key "
            "header: a member leaves itself. With an admin token: a batch of members, by "
            "member id and/or group instance id (KIP-345), with one result per member."
        ),
        request_body=LeaveGroupRequest,
        response_body=LeaveGroupResponse,
    ),
    Operation(
        "commitOffsets",
        "POST",
        GROUP_PATH + "/offsets/commit",
        member_api.commit_offsets,
        Access.GROUP,
        "OffsetCommit",
        _MEMBER,
        request_body=OffsetCommitRequest,
        response_body=OffsetCommitResponse,
    ),
    Operation(
        "fetchOffsets",
        "POST",
        GROUP_PATH + "/offsets/fetch",
        member_api.fetch_offsets,
        Access.GROUP,
        "OffsetFetch",
        _MEMBER,
        request_body=OffsetFetchRequest,
        response_body=OffsetFetchResponse,
    ),
    Operation(
        "getTopics",
        "GET",
        "/v1/topics",
        member_api.topic_metadata,
        Access.AUTHENTICATED,
        "Topic metadata: topic name -> partition count (leaders need it to assign)",
        _MEMBER,
        response_body=TopicMetadata,
    ),
    Operation(
        "setTopics",
        "PUT",
        "/v1/topics",
        admin_api.set_topics,
        Access.ADMIN,
        "Merge topic metadata; a count of 0 removes the topic. Answers the merged metadata",
        _ADMIN,
        request_body=TopicMetadata,
        response_body=TopicMetadata,
    ),
    Operation(
        "listGroups",
        "GET",
        "/v1/groups",
        admin_api.list_groups,
        Access.ADMIN,
        "ListGroups",
        _ADMIN,
        response_body=GroupList,
    ),
    Operation(
        "describeGroup",
        "GET",
        GROUP_PATH,
        admin_api.describe_group,
        Access.ADMIN,
        "DescribeGroups for one group (an unknown group is answered with its error code)",
        _ADMIN,
        response_body=DescribedGroup,
    ),
    Operation(
        "getGroupLag",
        "GET",
        GROUP_PATH + "/lag",
        admin_api.group_lag,
        Access.GROUP,
        "The group's lag (an autoscaler's source; KEDA's metrics-api scaler reads `lag`)",
        _AUTOSCALING,
        description=(
            "Served when the server is embedded in the operator, for embedded groups with "
            "spec.source.kafka: log end offsets on that cluster minus the commits here, summed "
            "over the spec's topics, as the operator last read it (at most every 15 s). A "
            "partition with no commit counts 0. 404 while there is no figure."
        ),
        response_body=LagFigure,
        uses_coordinator=False,
        extra_responses=((404, ErrorBody),),
    ),
    Operation(
        "deleteGroup",
        "DELETE",
        GROUP_PATH,
        admin_api.delete_group,
        Access.ADMIN,
        "DeleteGroups for one group (NON_EMPTY_GROUP while members remain)",
        _ADMIN,
        response_body=DeleteGroupResult,
    ),
    Operation(
        "getExpectedMembers",
        "GET",
        GROUP_PATH + "/expected-members",
        admin_api.get_expected_members,
        Access.ADMIN,
        "The group's expected members; an empty list when none",
        _ADMIN,
        response_body=ExpectedMembers,
    ),
    Operation(
        "setExpectedMembers",
        "PUT",
        GROUP_PATH + "/expected-members",
        admin_api.set_expected_members,
        Access.ADMIN,
        "Expect the group's static members (replaces its earlier expected members)",
        _ADMIN,
        description=(
            "While an expected instance id has not joined, the group's join phase is held "
            "(up to timeout_ms from now, at most the new-member join timeout), so a scale-up "
            "is one rebalance. Members that arrive later join as usual. Persisted: a restart "
            "keeps waiting for the same set until the same deadline. The group need not exist."
        ),
        request_body=ExpectedMembersRequest,
        response_body=ExpectedMembers,
    ),
    Operation(
        "clearExpectedMembers",
        "DELETE",
        GROUP_PATH + "/expected-members",
        admin_api.clear_expected_members,
        Access.ADMIN,
        "Forget the group's expected members; a held join phase ends as it otherwise would",
        _ADMIN,
        response_body=ExpectedMembers,
    ),
    Operation(
        "standbyHeartbeat",
        "POST",
        GROUP_PATH + "/standby-heartbeat",
        standby_api.standby_heartbeat,
        Access.GROUP,
        "A hot standby's heartbeat; the answer names its promotion once there is one",
        _MEMBER,
        description=(
            "A standby is not a group member: it holds nothing and no assignor sees it. Once "
            "promoted (promoteStandby) the answer carries the instance id, member id and "
            "generation it syncs with at once (and its leave key in the "
            "Staticfleet-Member-Key header)."
        ),
        request_body=StandbyHeartbeatRequest,
        response_body=StandbyHeartbeatResponse,
    ),
    Operation(
        "listStandbys",
        "GET",
        GROUP_PATH + "/standbys",
        standby_api.list_standbys,
        Access.ADMIN,
        "The group's ready standbys (heard from within their session) and promotions",
        _ADMIN,
        response_body=StandbyList,
    ),
    Operation(
        "promoteStandby",
        "POST",
        GROUP_PATH + "/promotions",
        standby_api.promote,
        Access.ADMIN,
        "Hand a missing static member's assignment to a ready standby, with no rebalance",
        _ADMIN,
        description=(
            "Stable groups only. The instance id gets a new member id (the old holder is "
            "fenced), the assignment and generation stay; persisted before the answer. "
            "Idempotent: a repeat answers NONE with the same promotion."
        ),
        request_body=PromoteRequest,
        response_body=PromoteResponse,
    ),
    Operation(
        "getJournal",
        "GET",
        "/v1/journal",
        admin_api.get_journal,
        Access.ADMIN,
        "Rebalance journal rows with seq > since, oldest first",
        _ADMIN,
        response_body=JournalPage,
        query=(
            QueryParam("group_id", {"type": "string"}, "Only this group's rows (empty: all)"),
            QueryParam(
                "since",
                {"type": "integer", "minimum": 0, "maximum": INT_MAX, "default": 0},
                "Rows after this sequence number; pass the previous page's next_since",
            ),
            QueryParam(
                "limit",
                {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": JOURNAL_MAX_LIMIT,
                    "default": JOURNAL_DEFAULT_LIMIT,
                },
                "Most rows in this page",
            ),
        ),
    ),
    Operation(
        "healthz",
        "GET",
        "/healthz",
        system_api.healthz,
        Access.PUBLIC,
        "Liveness: the process answers",
        _SYSTEM,
        response_body=Status,
        uses_coordinator=False,
    ),
    Operation(
        "readyz",
        "GET",
        "/readyz",
        system_api.readyz,
        Access.PUBLIC,
        "Readiness: the coordinator is started and its store open",
        _SYSTEM,
        response_body=Status,
        uses_coordinator=False,
        extra_responses=((503, Status),),
    ),
    Operation(
        "metrics",
        "GET",
        "/metrics",
        system_api.metrics,
        Access.PUBLIC,
        "Prometheus metrics (text exposition format)",
        _SYSTEM,
        response_media_type="text/plain",
        uses_coordinator=False,
    ),
    Operation(
        "openapi",
        "GET",
        "/openapi.json",
        system_api.openapi_document,
        Access.PUBLIC,
        "This OpenAPI document",
        _SYSTEM,
        response_media_type="application/json",
        uses_coordinator=False,
    ),
)
