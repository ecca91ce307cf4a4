"""The member fast path: a member's heartbeat, JoinGroup or SyncGroup answered without
aiohttp's request stack.

At full rate a heartbeat spent most of its server time in aiohttp's layers (issue 13:
writing the answer 31%, decoding the body 18%, building the reply 10%) and 5% in the
coordinator. A rebalance of a 1,000-member group is 1,000 JoinGroups and 1,000 SyncGroups
answered at once, and their aiohttp work was what kept it behind a Kafka broker's
(docs/performance.md). Each connection's bytes now pass through a `RequestSplitter` first:
it frames requests (the head parsed by httptools, a maintained HTTP/1.1 parser; the body by
its Content-Length) and answers the common case, an authorised, well-formed member request
on one of those three routes, itself: the body decoded by msgspec (the wire codec's
one-pass decoder), the coordinator called, the answer written with aiohttp's headers.

Everything else goes to aiohttp byte for byte, as before: other routes, and any request
the fast path is not sure about (unknown token, a body it cannot decode strictly, a group
mismatch, chunked bodies or bodies over MAX_FAST_BODY_BYTES, a body still incomplete
BODY_WAIT_S after its head, HTTP/1.0, the server not ready, ...). aiohttp then gives the
exact answer it always gave, so hostile input meets the same checks as before. The fast
path only ever accepts what the full path accepts: it decides before calling the
coordinator, so a fallback has no side effect to repeat.

A JoinGroup or SyncGroup may be parked for a whole rebalance. As under aiohttp (whose
handlers are not cancelled when their client goes away), the coordinator's call runs to
its end when the connection closes meanwhile; the answer is dropped.

Answers stay in request order: the fast path answers only while aiohttp has nothing in
progress on the connection, and reads no further request until its answer is written.
A request whose framing the splitter cannot follow (chunked, upgrade, unparseable head)
turns the connection over to aiohttp for good.

Hand-written (the framing and the dispatch) because no maintained library offers a second,
narrower request path in front of aiohttp's server; the parsing itself is httptools'.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from email.utils import formatdate
from typing import TYPE_CHECKING, Final

import httptools
import msgspec

from coordinator.errors import ErrorCode
from coordinator.messages import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from coordinator.server.auth import ADMIN, Principal, bearer_token
from coordinator.server.member_keys import join_key
from coordinator.server.pod_identity import PodIdentity, instance_problem, looks_like_jwt
from coordinator.wire import MEMBER_KEY_HEADER, decode_plain, encode, plain_type

if TYPE_CHECKING:
    from coordinator.server.context import ServerContext

log = logging.getLogger(__name__)

# A heartbeat body is ~150 bytes, a follower's JoinGroup or SyncGroup a few hundred, and a
# leader's SyncGroup ~120 bytes per member (~120 KB for 1,000). The leader's is on every
# member's path (followers' SyncGroups wait for it), so it is taken here up to this cap (or
# the server's own body limit, if lower): aiohttp would buffer as much, and its request task,
# body stream and fuller JSON policies are what the fast path spares (issue 26).
MAX_FAST_BODY_BYTES: Final = 1024 * 1024
# A body past this is buffered here only for a caller known by its token (the leader's
# SyncGroup is a member's); anyone else's goes to aiohttp from its head, as before.
MAX_UNKNOWN_CALLER_BODY_BYTES: Final = 16 * 1024
# A request head longer than this goes to aiohttp (which has its own limits).
MAX_FAST_HEAD_BYTES: Final = 8 * 1024
# How long a request's head waits for its body before aiohttp reads it instead (its body
# timeout starts then): a client writing head and body apart sends them microseconds apart.
BODY_WAIT_S: Final = 0.05

_MEMBER_PATH = re.compile(rb"/v1/groups/([A-Za-z0-9._~!$&'()*+,;=:@-]+)/(heartbeat|join|sync)")

FastRequest = HeartbeatRequest | JoinGroupRequest | SyncGroupRequest
# The routes' message types; a JoinGroup or SyncGroup can be parked (see the docstring).
_MESSAGE_TYPES: Final[dict[bytes, type[JoinGroupRequest] | type[SyncGroupRequest]]] = {
    b"join": JoinGroupRequest,
    b"sync": SyncGroupRequest,
}

# The wire codec's own one-pass type for HeartbeatRequest (one codec: the same msgspec
# Struct, int32 bounds and closed field set as the full path, `wire.decode_plain`), decoded
# from raw bytes; with it the fast path takes only what the full path would take as is.
_DECODER = msgspec.json.Decoder(plain_type(HeartbeatRequest))


def decode_heartbeat(body: bytes) -> HeartbeatRequest | None:
    """The heartbeat in `body`, or None when the full path must judge it. (msgspec refuses
    lone surrogates itself, which the store could not keep; tests check it.)"""
    try:
        parsed = _DECODER.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError):
        # msgspec raises UnicodeDecodeError, not DecodeError, for invalid UTF-8 in a string.
        return None
    return HeartbeatRequest(
        parsed.group_id, parsed.generation_id, parsed.member_id, parsed.group_instance_id
    )


class _Answers:
    """Pre-encoded answers: headers as aiohttp writes them, the Date refreshed each second."""

    def __init__(self) -> None:
        from aiohttp.http import SERVER_SOFTWARE

        self._server = SERVER_SOFTWARE.encode("ascii")
        self._bodies: dict[ErrorCode, bytes] = {}
        self._date_second = -1
        self._date = b""

    def _date_header(self) -> bytes:
        now = int(time.time())
        if now != self._date_second:
            self._date_second = now
            self._date = formatdate(now, usegmt=True).encode("ascii")
        return self._date

    def heartbeat(self, code: ErrorCode) -> bytes:
        body = self._bodies.get(code)
        if body is None:
            body = msgspec.json.encode({"error_code": int(code), "error": code.name})
            self._bodies[code] = body
        return self.ok(body)

    def ok(self, body: bytes, extra_headers: bytes = b"") -> bytes:
        """A 200 with `body`; `extra_headers` ("Name: value\\r\\n" lines) where aiohttp
        writes a handler's own headers, after Content-Type."""
        return b"".join(
            (
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n",
                extra_headers,
                b"Content-Length: ",
                str(len(body)).encode("ascii"),
                b"\r\nDate: ",
                self._date_header(),
                b"\r\nServer: ",
                self._server,
                b"\r\n\r\n",
                body,
            )
        )

    def error(self, status: int, reason: str, code: ErrorCode, message: str) -> bytes:
        body = msgspec.json.encode(
            {"error_code": int(code), "error": code.name, "message": message}
        )
        return (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode("ascii") + body


class FastPath:
    """The fast path of one server (shared by its connections)."""

    def __init__(self, context: ServerContext) -> None:
        self.context = context
        self.answers = _Answers()
        self.answered = 0
        self.fell_back = 0

    def principal(self, authorization: bytes | None) -> Principal | None:
        authenticator = self.context.authenticator
        if authenticator.insecure:
            return ADMIN
        if authorization is None:
            return None
        try:
            token = bearer_token(authorization.decode("ascii"))
        except UnicodeDecodeError:
            return None
        return None if token is None else authenticator.authenticate(token)

    def admit(
        self, group_id: str, route: bytes, authorization: bytes | None, body: bytes
    ) -> FastRequest | None:
        """The request to answer here, or None: aiohttp answers it. `route` is the path's
        last segment (heartbeat, join or sync)."""
        context = self.context
        principal = self.principal(authorization)
        pod = self.cached_pod(authorization) if principal is None else None
        if principal is None and pod is None:
            return None
        if principal is not None and not principal.may_use_group(group_id):
            return None
        if not context.ready:
            return None
        message: FastRequest | None
        if route == b"heartbeat":
            message = decode_heartbeat(body)
        else:
            message = decode_plain(_MESSAGE_TYPES[route], body)
        if message is None or message.group_id != group_id:
            return None
        pod_auth = context.pod_auth
        if pod is not None and (
            pod_auth is None
            or instance_problem(pod, pod_auth.bindings, group_id, message.group_instance_id)
            is not None
        ):
            return None  # aiohttp answers the 403
        return message

    def known_caller(self, authorization: bytes | None) -> bool:
        """Whether `authorization` names a caller `admit` may accept (by its token alone)."""
        return (
            self.principal(authorization) is not None or self.cached_pod(authorization) is not None
        )

    def cached_pod(self, authorization: bytes | None) -> PodIdentity | None:
        """A pod token whose review is cached (members known by their pod); None for any
        other: aiohttp reviews it, or refuses it."""
        pod_auth = self.context.pod_auth
        if pod_auth is None or authorization is None:
            return None
        try:
            token = bearer_token(authorization.decode("ascii"))
        except UnicodeDecodeError:
            return None
        if token is None or not looks_like_jwt(token):
            return None
        identity = pod_auth.cache.cached(token)
        return identity if isinstance(identity, PodIdentity) else None

    async def answer(self, message: FastRequest) -> bytes:
        """What the route's handler in member_api.py answers, metrics included."""
        if isinstance(message, HeartbeatRequest):
            operation = "heartbeat"
        elif isinstance(message, JoinGroupRequest):
            operation = "joinGroup"
        else:
            operation = "syncGroup"
        try:
            answer = await self._call(message)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("POST %s failed (fast path)", operation)
            self.context.metrics.observe_error(operation, ErrorCode.UNKNOWN_SERVER_ERROR)
            return self.answers.error(
                500,
                "Internal Server Error",
                ErrorCode.UNKNOWN_SERVER_ERROR,
                "internal error; see the coordinator's log",
            )
        self.answered += 1
        return answer

    async def _call(self, message: FastRequest) -> bytes:
        context = self.context
        metrics = context.metrics
        if isinstance(message, HeartbeatRequest):
            beat = await context.coordinator.heartbeat(message)
            metrics.observe_heartbeat(beat.error_code)
            metrics.observe_error("heartbeat", beat.error_code)
            return self.answers.heartbeat(beat.error_code)
        started = time.perf_counter()
        if isinstance(message, SyncGroupRequest):
            synced = await context.coordinator.sync_group(message)
            metrics.sync_latency.observe(time.perf_counter() - started)
            metrics.observe_error("syncGroup", synced.error_code)
            return self.answers.ok(encode(synced))
        joined = await context.coordinator.join_group(message)
        metrics.join_latency.observe(time.perf_counter() - started)
        metrics.observe_error("joinGroup", joined.error_code)
        key = join_key(context.member_keys, message.group_id, joined)
        extra = b"" if key is None else f"{MEMBER_KEY_HEADER}: {key}\r\n".encode("ascii")
        return self.answers.ok(encode(joined), extra)


class _Head:
    """httptools' callbacks for one request head."""

    __slots__ = ("authorization", "content_length", "headers_done", "not_fast", "unframed", "url")

    def __init__(self) -> None:
        self.url = b""
        self.authorization: bytes | None = None
        self.content_length: bytes | None = None
        self.headers_done = False
        # Framed some other way than by one Content-Length: aiohttp frames the rest.
        self.unframed = False
        # Framed, but a header the fast path leaves to aiohttp (or a repeated one).
        self.not_fast = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower == b"authorization":
            self.not_fast |= self.authorization is not None
            self.authorization = value
        elif lower == b"content-length":
            self.unframed |= self.content_length is not None
            self.content_length = value
        elif lower in (b"transfer-encoding", b"upgrade"):
            self.unframed = True
        elif lower in (b"expect", b"connection"):
            self.not_fast = True

    def on_headers_complete(self) -> None:
        self.headers_done = True


class RequestSplitter:
    """One connection's requests, each answered by the fast path or passed to aiohttp.

    `forward(data)` hands bytes to aiohttp's protocol; `aiohttp_idle()` says whether aiohttp
    has nothing in progress on the connection; `write(data)` sends an answer; `head_done(parks)`
    and `answered(parks)` tell the connection guard that a request head is complete /
    answered, `parks` when the request may wait for a rebalance (a JoinGroup or SyncGroup).
    """

    def __init__(
        self,
        fast_path: FastPath,
        forward: Callable[[bytes], None],
        aiohttp_idle: Callable[[], bool],
        write: Callable[[bytes], None],
        head_done: Callable[[bool], None],
        answered: Callable[[bool], None],
    ) -> None:
        self._fast = fast_path
        self._forward = forward
        self._aiohttp_idle = aiohttp_idle
        self._write = write
        self._head_done = head_done
        self._answered = answered
        self._buffer = bytearray()
        # Bytes of a forwarded request still to come (they go straight to aiohttp).
        self._forwarding = 0
        self._passthrough = False
        self._task: asyncio.Task[None] | None = None
        # The request in `_task` may be parked (a JoinGroup or SyncGroup).
        self._parks = False
        self._body_wait: asyncio.TimerHandle | None = None
        # While `_body_wait` is armed: the length of the request whose body is coming.
        self._body_total = 0
        self._closed = False

    def feed(self, data: bytes) -> None:
        if self._passthrough:
            self._forward(data)
            return
        if self._forwarding:
            if len(data) <= self._forwarding:
                self._forwarding -= len(data)
                self._forward(data)
                return
            self._forward(data[: self._forwarding])
            data = data[self._forwarding :]
            self._forwarding = 0
        self._buffer += data
        if self._body_wait is not None and len(self._buffer) < self._body_total:
            # A large body (a leader's SyncGroup) comes in many pieces: its head was parsed
            # when it came, not again for each piece.
            return
        self._process()

    def close(self) -> None:
        self._closed = True
        self._stop_waiting()
        # A parked JoinGroup or SyncGroup runs on, as aiohttp's handler would (see the
        # docstring); a heartbeat has nothing to wait for.
        if self._task is not None and not self._parks:
            self._task.cancel()

    def _give_up(self) -> None:
        """aiohttp takes the connection from here on, starting with what is buffered."""
        self._passthrough = True
        data = bytes(self._buffer)
        self._buffer.clear()
        if data:
            self._forward(data)

    def _process(self) -> None:
        while self._buffer and self._task is None and not self._closed:
            buffer = self._buffer
            end = buffer.find(b"\r\n\r\n", 0, MAX_FAST_HEAD_BYTES)
            if end < 0:
                if len(buffer) >= MAX_FAST_HEAD_BYTES:
                    self._give_up()
                return  # the head is not complete yet
            head_length = end + 4
            head = _Head()
            parser = httptools.HttpRequestParser(head)
            try:
                parser.feed_data(bytes(buffer[:head_length]))
            except httptools.HttpParserError:
                self._give_up()  # aiohttp answers 400 (or upgrades) as before
                return
            if not head.headers_done:
                self._give_up()
                return
            # No Content-Length and no Transfer-Encoding: a request without a body.
            length = 0 if head.content_length is None else _content_length(head.content_length)
            if length is None or head.unframed:
                # Chunked, upgraded or oddly framed: aiohttp frames it, and the rest.
                self._give_up()
                return
            total = head_length + length
            route = self._fast_route(parser, head, length)
            if route is None or not self._aiohttp_idle():
                self._stop_waiting()
                self._forward_request(total)
                continue
            if len(buffer) < total:
                # The body is still coming: wait a little for it (a client may write head
                # and body apart), then let aiohttp read it under its body timeout.
                self._head_done(False)
                if self._body_wait is None:
                    self._body_total = total
                    self._body_wait = asyncio.get_running_loop().call_later(
                        BODY_WAIT_S, self._body_late, total
                    )
                return
            self._stop_waiting()
            body = bytes(buffer[head_length:total])
            group, name = route
            message = self._fast.admit(group, name, head.authorization, body)
            if message is None:
                self._fast.fell_back += 1
                self._forward_request(total)
                continue
            del buffer[:total]
            self._parks = not isinstance(message, HeartbeatRequest)
            self._head_done(self._parks)
            self._task = asyncio.get_running_loop().create_task(self._reply(message))

    def _stop_waiting(self) -> None:
        if self._body_wait is not None:
            self._body_wait.cancel()
            self._body_wait = None

    def _body_late(self, total: int) -> None:
        self._body_wait = None
        if not self._closed and self._task is None:
            self._forward_request(total)

    def _fast_route(
        self, parser: httptools.HttpRequestParser, head: _Head, length: int
    ) -> tuple[str, bytes] | None:
        """(group id, route) of a request the fast path may take, by its head alone."""
        if parser.get_method() != b"POST" or head.not_fast:
            return None
        if parser.get_http_version() != "1.1":
            return None
        if not parser.should_keep_alive() or not 0 < length <= self._fast_limit():
            return None
        if length > MAX_UNKNOWN_CALLER_BODY_BYTES and not self._fast.known_caller(
            head.authorization
        ):
            # Not buffered for a caller aiohttp refuses (it answers without reading the body).
            return None
        match = _MEMBER_PATH.fullmatch(head.url)
        return (match.group(1).decode("ascii"), match.group(2)) if match else None

    def _fast_limit(self) -> int:
        return min(MAX_FAST_BODY_BYTES, self._fast.context.max_body_bytes)

    def _forward_request(self, total: int) -> None:
        """Pass one framed request to aiohttp: what is buffered now, the rest as it comes."""
        buffer = self._buffer
        if len(buffer) >= total:
            data = bytes(buffer[:total])
            del buffer[:total]
        else:
            data = bytes(buffer)
            buffer.clear()
            self._forwarding = total - len(data)
        self._forward(data)

    async def _reply(self, message: FastRequest) -> None:
        try:
            answer = await self._fast.answer(message)
            if not self._closed:
                self._write(answer)
                self._answered(self._parks)
        finally:
            self._task = None
        if not self._closed and self._buffer:
            self._process()


def _content_length(value: bytes | None) -> int | None:
    if value is None:
        return None
    text = value.strip()
    if not text.isdigit() or len(text) > 15:
        return None
    return int(text)
