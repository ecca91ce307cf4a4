"""Hot standby routes: a standby's heartbeat (member token), and the admin's view and
`promote` (see `coordinator.standby_protocol` for the rules)."""

from __future__ import annotations

from aiohttp import web

from coordinator.server.bodies import read_message
from coordinator.server.context import context_of
from coordinator.server.member_api import read_group_message
from coordinator.server.member_keys import MEMBER_KEY_HEADER
from coordinator.server.replies import reply
from coordinator.standby import PromoteRequest, StandbyHeartbeatRequest


async def standby_heartbeat(request: web.Request) -> web.Response:
    context, message = await read_group_message(request, StandbyHeartbeatRequest)
    response = await context.coordinator.standby_heartbeat(message)
    context.metrics.observe_error("standbyHeartbeat", response.error_code)
    answer = reply(response)
    promoted = response.promoted
    if promoted is not None and context.member_keys is not None:
        # The promoted standby is this member now: it gets the leave key a join would give.
        answer.headers[MEMBER_KEY_HEADER] = context.member_keys.key_for(
            message.group_id, promoted.member_id
        )
    return answer


async def list_standbys(request: web.Request) -> web.Response:
    context = context_of(request)
    return reply(context.coordinator.standbys(request.match_info["group_id"]))


async def promote(request: web.Request) -> web.Response:
    context = context_of(request)
    body = await read_message(
        request, PromoteRequest, context.max_body_bytes, context.body_timeout_s
    )
    response = await context.coordinator.promote(
        request.match_info["group_id"], body.standby_id, body.instance_id
    )
    context.metrics.observe_error("promoteStandby", response.error_code)
    return reply(response)
