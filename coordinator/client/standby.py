"""A hot standby's wait: heartbeat as a standby until the coordinator names a promotion.

The process holds nothing meanwhile (it is not a group member). Once promoted it builds
its `GroupMember` with the instance id it was given and starts it with `promoted=`, so the
member's first request is a SyncGroup in the current generation: the missing member's
assignment, no rebalance (docs/operator.md, "Hot standby").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from coordinator.client.backoff import Backoff
from coordinator.client.timing import MonotonicClock, sleep
from coordinator.client.transport import TransportError
from coordinator.clock import Clock
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.standby import Promoted, StandbyHeartbeatRequest, StandbyHeartbeatResponse

logger = logging.getLogger(__name__)

# Answers after which waiting longer cannot help.
_FATAL = frozenset(
    {ErrorCode.INVALID_GROUP_ID, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_SESSION_TIMEOUT}
)


STANDBY_BEATS_PER_INTERVAL = 4
MIN_POLL_MS = 25


class StandbyTransport(Protocol):
    async def standby_heartbeat(
        self, request: StandbyHeartbeatRequest
    ) -> StandbyHeartbeatResponse: ...


async def wait_for_promotion(
    transport: StandbyTransport,
    group_id: str,
    standby_id: str,
    *,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    retry_backoff_ms: int = 100,
    retry_backoff_max_ms: int = 1000,
    clock: Clock | None = None,
    on_answer: Callable[[], None] | None = None,
) -> Promoted:
    """Heartbeat until promoted; returns the promotion. A standby heartbeats
    `STANDBY_BEATS_PER_INTERVAL` times per heartbeat interval (a tiny request, and the
    takeover is then a fraction of an interval after the promotion). An unreachable
    coordinator is retried (a standby has nothing to lose); a refused request raises
    `CoordinatorError`. Waits go through `clock` (default: the real one). `on_answer` is
    called for every answer that is not a refusal (a health endpoint's "heartbeating")."""
    clock = clock if clock is not None else MonotonicClock()
    request = StandbyHeartbeatRequest(group_id, standby_id, session_timeout_ms)
    backoff = Backoff(retry_backoff_ms, retry_backoff_max_ms)
    interval_ms = max(heartbeat_interval_ms // STANDBY_BEATS_PER_INTERVAL, MIN_POLL_MS)
    while True:
        try:
            answer = await transport.standby_heartbeat(request)
        except TransportError as error:
            logger.debug("standby %s: heartbeat failed: %s", standby_id, error)
            await sleep(clock, min(interval_ms, backoff.next_delay_ms()))
            continue
        except CoordinatorError as error:
            if error.code is not ErrorCode.GROUP_AUTHORIZATION_FAILED:
                raise
            # A restarting operator refuses tokens until it has registered them again; a
            # standby holds nothing, so it keeps asking (a wrong token shows in the log).
            logger.warning("standby %s: token refused, retrying: %s", standby_id, error)
            await sleep(clock, max(interval_ms, backoff.next_delay_ms()))
            continue
        backoff.reset()
        if answer.promoted is not None:
            logger.info(
                "standby %s promoted to %s (member %s, generation %d)",
                standby_id,
                answer.promoted.instance_id,
                answer.promoted.member_id,
                answer.promoted.generation_id,
            )
            return answer.promoted
        if answer.error_code in _FATAL:
            raise CoordinatorError(answer.error_code, f"standby heartbeat by {standby_id}")
        if answer.error_code is not ErrorCode.NONE:
            logger.info("standby %s: heartbeat returned %s", standby_id, answer.error_code.name)
        elif on_answer is not None:
            on_answer()
        await sleep(clock, interval_ms)
