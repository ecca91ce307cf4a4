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

    # asyncio.Protocol, forwarded to aiohttp's handler once admitted.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self._address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        if not self._guard._admit(self, self._address):
            transport.abort()
            return
        self._inner = self._inner_factory()
        self._inner.connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if not self.busy and self._deadline is None:
            self._arm()  # the first bytes of the next request on a kept-alive connection
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
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
