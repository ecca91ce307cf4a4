"""Connection limits aiohttp does not have: a deadline for a request's head, and a cap on
open connections per client address. (The idle keep-alive timeout is aiohttp's own
`keepalive_timeout`; the body deadline is applied where the body is read, `bodies.py`.)

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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

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

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keepalive_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        cap = self.max_connections_per_address
        if cap is not None and cap < 1:
            raise ValueError("max_connections_per_address must be >= 1 (or None)")


class ConnectionGuard:
    """Tracks the server's connections; see the module docstring."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self._per_address: Counter[str] = Counter()
        self._by_transport: dict[asyncio.BaseTransport, _GuardedProtocol] = {}
        self.closed_slow = 0
        self.refused_over_cap = 0
        # Set by `create_app`: heartbeats answered ahead of aiohttp (fast_path.py).
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

    def _admit(self, protocol: _GuardedProtocol, address: str) -> bool:
        cap = self.limits.max_connections_per_address
        if cap is not None and self._per_address[address] >= cap:
            self.refused_over_cap += 1
            if self.refused_over_cap == 1 or self.refused_over_cap % 1000 == 0:
                log.warning(
                    "refusing a connection from %s: %d already open (max %d per address); "
                    "%d refused so far",
                    address,
                    self._per_address[address],
                    cap,
                    self.refused_over_cap,
                )
            return False
        self._per_address[address] += 1
        assert protocol.transport is not None
        self._by_transport[protocol.transport] = protocol
        return True

    def _release(self, protocol: _GuardedProtocol, address: str) -> None:
        if protocol.transport is not None:
            self._by_transport.pop(protocol.transport, None)
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
            # Armed after feeding: a heartbeat answered by the fast path is no longer
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

    def _fast_head_done(self) -> None:
        self.busy = True
        self.disarm()
        self._keep_alive()

    def _fast_answered(self) -> None:
        self.busy = False

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


_REQUEST_STATE = ("_waiter", "_messages", "_next_keepalive_close_time", "_keepalive_timeout")


def _has_request_state(protocol: asyncio.Protocol) -> bool:
    return all(hasattr(protocol, name) for name in _REQUEST_STATE)
