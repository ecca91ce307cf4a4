"""Admin routes: list, describe and delete groups, set topic metadata, read the journal.

(Batch LeaveGroup is the member route with an admin token; see `member_api.leave_group`.)
"""

from __future__ import annotations

from aiohttp import web

from coordinator import expected_members
from coordinator.errors import ErrorCode
from coordinator.identifiers import valid_id
from coordinator.server.bodies import query_int, query_text, read_message
from coordinator.server.context import context_of
from coordinator.server.http_errors import ApiError, bad_request
from coordinator.server.limits import INT_MAX, JOURNAL_DEFAULT_LIMIT, JOURNAL_MAX_LIMIT
from coordinator.server.models import (
    INT32_MAX,
    DeleteGroupResult,
    ExpectedMembers,
    ExpectedMembersRequest,
    GroupList,
    JournalPage,
    TopicMetadata,
    topic_problem,
)
from coordinator.server.replies import reply


async def list_groups(request: web.Request) -> web.Response:
    context = context_of(request)
    return reply(GroupList(groups=await context.coordinator.list_groups()))


async def describe_group(request: web.Request) -> web.Response:
    context = context_of(request)
    group_id = request.match_info["group_id"]
    (described,) = await context.coordinator.describe_groups([group_id])
    context.metrics.observe_error("describeGroup", described.error_code)
    return reply(described)


async def group_lag(request: web.Request) -> web.Response:
    """The group's lag as the embedding operator last read it; 404 while there is none (no
    such group, no spec.source, not read yet, or a server that embeds no operator)."""
    context = context_of(request)
    group_id = request.match_info["group_id"]
    figure = context.group_lag(group_id) if context.group_lag is not None else None
    if figure is None:
        raise ApiError(
            404,
            ErrorCode.GROUP_ID_NOT_FOUND,
            f"no lag figure for group {group_id!r}: the operator reads lag for embedded "
            "groups with spec.source.kafka",
        )
    return reply(figure)


async def delete_group(request: web.Request) -> web.Response:
    context = context_of(request)
    group_id = request.match_info["group_id"]
    results = await context.coordinator.delete_groups([group_id])
    code = results[group_id]
    context.metrics.observe_error("deleteGroup", code)
    return reply(DeleteGroupResult(group_id=group_id, error_code=code))


def _expected_members(
    group_id: str,
    expected: expected_members.ExpectedMembers | None,
    code: ErrorCode = ErrorCode.NONE,
) -> ExpectedMembers:
    if expected is None:
        return ExpectedMembers(
            group_id=group_id, instance_ids=[], timeout_ms=0, deadline_ms=0, error_code=code
        )
    return ExpectedMembers(
        group_id=group_id,
        instance_ids=sorted(expected.instance_ids),
        timeout_ms=expected.timeout_ms,
        deadline_ms=expected.deadline_ms,
    )


async def get_expected_members(request: web.Request) -> web.Response:
    context = context_of(request)
    group_id = request.match_info["group_id"]
    return reply(_expected_members(group_id, context.coordinator.expected_members(group_id)))


async def set_expected_members(request: web.Request) -> web.Response:
    context = context_of(request)
    group_id = request.match_info["group_id"]
    body = await read_message(
        request, ExpectedMembersRequest, context.max_body_bytes, context.body_timeout_s
    )
    if not body.instance_ids or not all(body.instance_ids):
        raise bad_request("instance_ids must be a non-empty list of non-empty ids")
    if not 0 < body.timeout_ms <= INT32_MAX:
        raise bad_request(f"timeout_ms must be 1..{INT32_MAX}")
    # As the other admin routes: an id the protocol refuses is an error code, not a 400.
    if not valid_id(group_id):
        return reply(_expected_members(group_id, None, ErrorCode.INVALID_GROUP_ID))
    try:
        expected = await context.coordinator.set_expected_members(
            group_id, body.instance_ids, body.timeout_ms
        )
    except ValueError:
        return reply(_expected_members(group_id, None, ErrorCode.INVALID_REQUEST))
    return reply(_expected_members(group_id, expected))


async def clear_expected_members(request: web.Request) -> web.Response:
    context = context_of(request)
    group_id = request.match_info["group_id"]
    if not valid_id(group_id):
        return reply(_expected_members(group_id, None, ErrorCode.INVALID_GROUP_ID))
    await context.coordinator.clear_expected_members(group_id)
    return reply(_expected_members(group_id, None))


async def set_topics(request: web.Request) -> web.Response:
    context = context_of(request)
    body = await read_message(
        request,
        TopicMetadata,
        context.max_body_bytes,
        context.body_timeout_s,
    )
    for name, count in body.topics.items():
        problem = topic_problem(name, count)
        if problem:
            raise bad_request(problem)
    await context.coordinator.set_topic_metadata(body.topics)
    return reply(TopicMetadata(topics=await context.coordinator.topic_metadata()))


async def get_journal(request: web.Request) -> web.Response:
    context = context_of(request)
    group_id = query_text(request, "group_id") or None
    since = query_int(request, "since", default=0, minimum=0, maximum=INT_MAX)
    limit = query_int(
        request, "limit", default=JOURNAL_DEFAULT_LIMIT, minimum=1, maximum=JOURNAL_MAX_LIMIT
    )
    events = await context.coordinator.journal_rows(group_id=group_id, since_seq=since, limit=limit)
    next_since = events[-1].seq if events else since
    return reply(JournalPage(events=events, next_since=next_since))
