"""Admin routes: list, describe and delete groups, set topic metadata, read the journal.

(Batch LeaveGroup is the member route with an admin token; see `member_api.leave_group`.)
"""

from __future__ import annotations

from aiohttp import web

from coordinator.server.bodies import query_int, query_text, read_message
from coordinator.server.context import context_of
from coordinator.server.http_errors import bad_request
from coordinator.server.limits import INT_MAX, JOURNAL_DEFAULT_LIMIT, JOURNAL_MAX_LIMIT
from coordinator.server.models import (
    DeleteGroupResult,
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


async def delete_group(request: web.Request) -> web.Response:
    context = context_of(request)
    group_id = request.match_info["group_id"]
    results = await context.coordinator.delete_groups([group_id])
    code = results[group_id]
    context.metrics.observe_error("deleteGroup", code)
    return reply(DeleteGroupResult(group_id=group_id, error_code=code))


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
    return reply(TopicMetadata(topics=context.coordinator.topic_metadata()))


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
