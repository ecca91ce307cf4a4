"""The member protocol routes: join, sync, heartbeat, leave, offsets, topic metadata.

Each decodes its body strictly, checks that the body's group is the path's group (the
path is what the token was authorised for), calls the coordinator and answers 200 with the
coordinator's response, Kafka error code included: that is the protocol, not a failure.
"""

from __future__ import annotations

import time
from typing import Protocol, TypeVar

from aiohttp import web

from coordinator.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from coordinator.server.auth import Principal
from coordinator.server.bodies import read_message
from coordinator.server.context import ServerContext, context_of, request_principal
from coordinator.server.http_errors import bad_request, forbidden
from coordinator.server.limits import group_body_limit
from coordinator.server.member_keys import MEMBER_KEY_HEADER, join_key
from coordinator.server.models import TopicMetadata
from coordinator.server.pod_identity import instance_problem
from coordinator.server.replies import reply


class _GroupMessage(Protocol):
    @property
    def group_id(self) -> str: ...


M = TypeVar("M", bound=_GroupMessage)


async def read_group_message(request: web.Request, cls: type[M]) -> tuple[ServerContext, M]:
    context = context_of(request)
    path_group = request.match_info["group_id"]
    limit = group_body_limit(
        context.max_body_bytes,
        context.coordinator.group_size(path_group),
        await context.coordinator.topic_metadata(),
    )
    message = await read_message(request, cls, limit, context.body_timeout_s)
    if message.group_id != path_group:
        raise bad_request(
            f"group_id in the body ({message.group_id!r}) differs from the path ({path_group!r})"
        )
    await _check_pod_instance(request, context, message)
    return context, message


def _instance_ids(message: object) -> tuple[str | None, ...]:
    """The instance ids a request acts as: a leave's members', or the one the request names.
    An offset fetch reads the group's offsets and acts as nobody."""
    if isinstance(message, OffsetFetchRequest):
        return ()
    if isinstance(message, LeaveGroupRequest):
        return tuple(member.group_instance_id for member in message.members)
    instance_id: str | None = getattr(message, "group_instance_id", None)
    return (instance_id,)


async def _check_pod_instance(
    request: web.Request, context: ServerContext, message: object
) -> None:
    """A member known by its pod acts only as its pod's instance id: any other (or none, a
    dynamic join from a static pod) is a 403 naming the pod's own (docs/server.md)."""
    pod_auth = context.pod_auth
    if pod_auth is None:
        return
    principal = await request_principal(request)  # the review is cached: a dict lookup
    if not isinstance(principal, Principal) or principal.pod is None:
        return
    group_id = request.match_info["group_id"]
    for instance_id in _instance_ids(message):
        problem = instance_problem(principal.pod, pod_auth.bindings, group_id, instance_id)
        if problem is not None:
            raise forbidden(f"the pod token may not act as instance id {instance_id!r}: {problem}")


async def join_group(request: web.Request) -> web.Response:
    context, message = await read_group_message(request, JoinGroupRequest)
    started = time.perf_counter()
    response = await context.coordinator.join_group(message)
    context.metrics.join_latency.observe(time.perf_counter() - started)
    context.metrics.observe_error("joinGroup", response.error_code)
    answer = reply(response)
    key = join_key(context.member_keys, message.group_id, response)
    if key is not None:
        answer.headers[MEMBER_KEY_HEADER] = key
    return answer


async def sync_group(request: web.Request) -> web.Response:
    context, message = await read_group_message(request, SyncGroupRequest)
    started = time.perf_counter()
    response = await context.coordinator.sync_group(message)
    context.metrics.sync_latency.observe(time.perf_counter() - started)
    context.metrics.observe_error("syncGroup", response.error_code)
    return reply(response)


async def heartbeat(request: web.Request) -> web.Response:
    context, message = await read_group_message(request, HeartbeatRequest)
    response = await context.coordinator.heartbeat(message)
    context.metrics.observe_heartbeat(response.error_code)
    context.metrics.observe_error("heartbeat", response.error_code)
    return reply(response)


async def leave_group(request: web.Request) -> web.Response:
    context, message = await read_group_message(request, LeaveGroupRequest)
    # The guard admitted this caller already; a missing principal cannot happen here, but
    # would fail closed. A member knows its own member id; removing anyone else (or by
    # instance id alone, as the operator's scale-down does) is an admin's batch leave.
    principal = await request_principal(request)
    is_admin = isinstance(principal, Principal) and principal.is_admin
    if not is_admin:
        leaves_itself = len(message.members) == 1 and bool(message.members[0].member_id)
        if not isinstance(principal, Principal) or not leaves_itself:
            raise forbidden(
                "a member token may only leave the group itself: exactly one member, with "
                "its member id; batch leave needs an admin token"
            )
        keys = context.member_keys
        presented = request.headers.get(MEMBER_KEY_HEADER)
        if keys is None or not keys.matches(
            message.group_id, message.members[0].member_id, presented
        ):
            raise forbidden(
                f"a member token may only leave the group itself: send the {MEMBER_KEY_HEADER} "
                "header its JoinGroup answer carried"
            )
    response = await context.coordinator.leave_group(message)
    context.metrics.observe_error("leaveGroup", response.error_code)
    return reply(response)


async def commit_offsets(request: web.Request) -> web.Response:
    context, message = await read_group_message(request, OffsetCommitRequest)
    response = await context.coordinator.commit_offsets(message)
    context.metrics.observe_error("commitOffsets", response.error_code)
    return reply(response)


async def fetch_offsets(request: web.Request) -> web.Response:
    context, message = await read_group_message(request, OffsetFetchRequest)
    response = await context.coordinator.fetch_offsets(message)
    context.metrics.observe_error("fetchOffsets", response.error_code)
    return reply(response)


async def topic_metadata(request: web.Request) -> web.Response:
    context = context_of(request)
    return reply(TopicMetadata(topics=await context.coordinator.topic_metadata()))
