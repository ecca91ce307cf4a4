"""Connection limits aiohttp does not have: a deadline for a request's head, and a cap on
open connections per client address and in all (the process's descriptors, `descriptors.py`).
(The idle keep-alive timeout is aiohttp's own `keepalive_timeout`; the body deadline is applied
where the body is read, `bodies.py`.)

Hand-written because no maintained library offers it for aiohttp's server: a thin
`asyncio.Protocol` wraps each aiohttp `RequestHandler`, watches when bytes arrive, and is
told by a middleware when a request has been parsed (`request_started`) and answered
(`request_finished`). A connection that holds a request head open longer than the head
timeout (a slow-header "slowloris" client, or one that connects and sends nothing) is
closed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

from coordinator.server.descriptors import (
    DEFAULT_DESCRIPTOR_RESERVE,
    connection_ceiling,
    open_descriptors,
    soft_open_file_limit,
)
from coordinator.server.fast_path import FastPath, RequestSplitter

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    # From connecting (or from the previous answer) to a complete request head.
    header_timeout_s: float = 10.0
    # Reading a request body once its head has arrived.
    body_timeout_s: float = 30.0
    # An idle keep-alive connection is closed after this (aiohttp's keepalive_timeout).
    keepalive_timeout_s: float = 75.0
    # Open connections per client IP address; None: no cap. One member holds about two
    # (a long poll and its heartbeats), so a whole fleet behind one address fits.
    max_connections_per_address: int | None = 4096
    # Descriptors left free when the open-file limit caps connections (descriptors.py).
    descriptor_reserve: int = DEFAULT_DESCRIPTOR_RESERVE

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keepalive_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        cap = self.max_connections_per_address
        if cap is not None and cap < 1:
            raise ValueError("max_connections_per_address must be >= 1 (or None)")
        if self.descriptor_reserve < 0:
            raise ValueError("descriptor_reserve must be >= 0")


# Why a connection was refused: the `reason` label of connections_refused_total.
REFUSED_DESCRIPTORS: Final = "descriptors"
REFUSED_PER_ADDRESS: Final = "per_address"
REFUSAL_REASONS: Final = (REFUSED_DESCRIPTORS, REFUSED_PER_ADDRESS)

# How often the connection ceiling may be recounted (it lists the process's descriptors),
# and how often a line about descriptor refusals may be logged.
RECOUNT_INTERVAL_S = 1.0
REFUSAL_LOG_INTERVAL_S = 1.0


@dataclass(slots=True)
class ThrottledCount:
    """Counts events and says when one may be logged: at most once per `interval_s`, with
    how many came since the last line (a flood of refusals must not flood the log)."""

    interval_s: float
    total: int = 0
    unlogged: int = 0
    logged_at: float = -math.inf

    def add(self, now: float) -> int | None:
        """Count one; the number to report when a line is due now, else None."""
        self.total += 1
        self.unlogged += 1
        if now - self.logged_at < self.interval_s:
            return None
        count, self.unlogged, self.logged_at = self.unlogged, 0, now
        return count


class ConnectionGuard:
    """Tracks the server's connections; see the module docstring."""

    def __init__(
        self,
        limits: ConnectionLimits,
        *,
        clock: Callable[[], float] = time.monotonic,
        soft_limit: Callable[[], int | None] = soft_open_file_limit,
        count_descriptors: Callable[[], int | None] = open_descriptors,
    ) -> None:
        self.limits = limits
        self._per_address: Counter[str] = Counter()
        self._by_transport: dict[asyncio.BaseTransport, _GuardedProtocol] = {}
        self.closed_slow = 0
        # Connections admitted and not yet lost; refusals by reason (REFUSED_*).
        self.open_total = 0
        self.refused: Counter[str] = Counter()
        self._clock = clock
        self._soft_limit = soft_limit
        self._count_descriptors = count_descriptors
        self._ceiling: int | None = None
        self._counted_at = -math.inf
        self._descriptor_refusals = ThrottledCount(REFUSAL_LOG_INTERVAL_S)
        # Set by `create_app`: member requests answered ahead of aiohttp (fast_path.py).
        self.fast_path: FastPath | None = None

    def protocol_factory(
        self, inner_factory: Callable[[], asyncio.Protocol]
    ) -> Callable[[], asyncio.Protocol]:
        return lambda: _GuardedProtocol(self, inner_factory)

    def request_started(self, transport: asyncio.BaseTransport | None) -> None:
        """The request's head is parsed: its deadline no longer applies."""
        protocol = self._by_transport.get(transport) if transport is not None else None
        if protocol is not None:
            protocol.busy = True
            protocol.disarm()

    def request_finished(self, transport: asyncio.BaseTransport | None) -> None:
        protocol = self._by_transport.get(transport) if transport is not None else None
        if protocol is not None:
            protocol.busy = False

    def open_connections(self, address: str) -> int:
        return self._per_address[address]

    def _at_descriptor_ceiling(self) -> bool:
        """True when admitting one more connection would eat into the descriptor reserve.
        The ceiling is recounted when reached (at most once per RECOUNT_INTERVAL_S): the
        server's other descriptors come and go."""
        if self._ceiling is not None and self.open_total < self._ceiling:
            return False
        now = self._clock()
        if now - self._counted_at >= RECOUNT_INTERVAL_S:
            self._counted_at = now
            soft = self._soft_limit()
            counted = self._count_descriptors() if soft is not None else None
            # The connection being admitted already holds its descriptor: not an "other".
            other = 0 if counted is None else max(0, counted - self.open_total - 1)
            self._ceiling = connection_ceiling(soft, other, self.limits.descriptor_reserve)
        return self._ceiling is not None and self.open_total >= self._ceiling

    def _admit(self, protocol: _GuardedProtocol, address: str) -> bool:
        if self._at_descriptor_ceiling():
            self.refused[REFUSED_DESCRIPTORS] += 1
            count = self._descriptor_refusals.add(self._clock())
            if count is not None:
                log.warning(
                    "refusing connections: %d open, at the open-file limit (%s, keeping %d "
                    "descriptors in reserve); %d refused since the last line, %d in all",
                    self.open_total,
                    self._soft_limit(),
                    self.limits.descriptor_reserve,
                    count,
                    self._descriptor_refusals.total,
                )
            return False
        cap = self.limits.max_connections_per_address
        if cap is not None and self._per_address[address] >= cap:
            self.refused[REFUSED_PER_ADDRESS] += 1
            refused = self.refused[REFUSED_PER_ADDRESS]
            if refused == 1 or refused % 1000 == 0:
                log.warning(
                    "refusing a connection from %s: %d already open (max %d per address); "
                    "%d refused so far",
                    address,
                    self._per_address[address],
                    cap,
                    refused,
                )
            return False
        self.open_total += 1
        self._per_address[address] += 1
        assert protocol.transport is not None
        self._by_transport[protocol.transport] = protocol
        return True

    def _release(self, protocol: _GuardedProtocol, address: str) -> None:
        if protocol.transport is not None:
            self._by_transport.pop(protocol.transport, None)
        self.open_total -= 1
        self._per_address[address] -= 1
        if self._per_address[address] <= 0:
            del self._per_address[address]


class _GuardedProtocol(asyncio.Protocol):
    def __init__(
        self, guard: ConnectionGuard, inner_factory: Callable[[], asyncio.Protocol]
    ) -> None:
        self._guard = guard
        self._inner_factory = inner_factory
        self._inner: asyncio.Protocol | None = None
        self._address = ""
        self._deadline: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self._splitter: RequestSplitter | None = None

    # asyncio.Protocol, forwarded to aiohttp's handler once admitted.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its interface.
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self._address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        if not self._guard._admit(self, self._address):
            self.transport.abort()
            return
        self._inner = self._inner_factory()
        self._inner.connection_made(transport)
        fast_path = self._guard.fast_path
        if fast_path is not None and _has_request_state(self._inner):
            self._splitter = RequestSplitter(
                fast_path,
                forward=self._inner.data_received,
                aiohttp_idle=self._aiohttp_idle,
                write=self.transport.write,
                head_done=self._fast_head_done,
                answered=self._fast_answered,
            )
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._splitter is not None:
            self._splitter.feed(data)
            # Armed after feeding: a request answered by the fast path is no longer
            # waiting for its head, and needs no timer set and cancelled.
            if not self.busy and self._deadline is None:
                self._arm()  # the first bytes of the next request on a kept-alive connection
            return
        if not self.busy and self._deadline is None:
            self._arm()
        self._inner.data_received(data)

    # The fast path's view of aiohttp's handler. These are private attributes of aiohttp's
    # RequestHandler (`_has_request_state` checks they exist, else no fast path; a test
    # fails loudly if an aiohttp upgrade removes them).

    def _aiohttp_idle(self) -> bool:
        """aiohttp is waiting for a request: nothing queued, none in progress, so an answer
        written now cannot overtake one of its own."""
        inner: Any = self._inner
        waiter = inner._waiter
        return waiter is not None and not waiter.done() and not inner._messages

    def _keep_alive(self) -> None:
        # aiohttp closes a connection it saw idle for its keep-alive timeout; requests the
        # fast path answered count as activity.
        inner: Any = self._inner
        inner._next_keepalive_close_time = (
            asyncio.get_running_loop().time() + inner._keepalive_timeout
        )

    def _fast_head_done(self, parks: bool) -> None:
        self.busy = True
        self.disarm()
        self._keep_alive()
        if parks:
            # aiohttp sees its handler idle while the fast path holds a parked JoinGroup or
            # SyncGroup (up to a rebalance timeout, longer than the keep-alive timeout): its
            # keep-alive check must not close the connection meanwhile. Re-armed when
            # answered, as aiohttp arms it after a request of its own.
            inner: Any = self._inner
            if inner._keepalive_handle is not None:
                inner._keepalive_handle.cancel()
                inner._keepalive_handle = None

    def _fast_answered(self, parks: bool) -> None:
        self.busy = False
        if parks:
            self._keep_alive()
            inner: Any = self._inner
            if inner._keepalive_handle is None and inner._keepalive_timeout > 0:
                inner._keepalive_handle = asyncio.get_running_loop().call_at(
                    inner._next_keepalive_close_time, inner._process_keepalive
                )

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        if self._splitter is not None:
            self._splitter.close()
        if self._inner is None:
            return
        self._guard._release(self, self._address)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    # The head deadline.

    def _arm(self) -> None:
        self.disarm()
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self._guard.limits.header_timeout_s, self._expire)

    def disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.busy or self.transport is None:
            return
        self._guard.closed_slow += 1
        closed = self._guard.closed_slow
        if closed == 1 or closed % 100 == 0:  # a flood of slow clients must not flood the log
            log.info(
                "closing a connection from %s: no complete request head within %.0f s "
                "(%d closed so far)",
                self._address,
                self._guard.limits.header_timeout_s,
                closed,
            )
        self.transport.abort()


_REQUEST_STATE = (
    "_waiter",
    "_messages",
    "_next_keepalive_close_time",
    "_keepalive_timeout",
    "_keepalive_handle",
    "_process_keepalive",
)


def _has_request_state(protocol: asyncio.Protocol) -> bool:
    return all(hasattr(protocol, name) for name in _REQUEST_STATE)
