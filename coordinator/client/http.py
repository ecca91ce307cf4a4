"""A transport over the coordinator's HTTP/JSON API (`coordinator.server`).

Request and response bodies are `coordinator.wire` JSON. Kafka protocol errors arrive in
200 bodies and are returned as responses; a 4xx refusal (auth, validation) becomes a
`CoordinatorError` with the server's error code; an unreachable or failing server (refused
connection, timeout, 5xx) becomes a retriable `TransportError`.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp

from coordinator.client.coordinator_tls import refusal
from coordinator.client.token_file import TokenFile
from coordinator.client.transport import RequestTooLargeError, TransportError
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.messages import (
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
from coordinator.standby import StandbyHeartbeatRequest, StandbyHeartbeatResponse
from coordinator.wire import MEMBER_KEY_HEADER, WireError, from_json, to_json

R = TypeVar("R")

# Kafka's JOIN_GROUP_TIMEOUT_LAPSE: a join may legitimately be parked for the whole
# rebalance timeout, so the client waits that long plus a margin before giving up.
LONG_POLL_MARGIN_MS = 5_000
DEFAULT_REQUEST_TIMEOUT_MS = 30_000


class HttpTransport:
    def __init__(
        self,
        base_url: str,
        token: str | TokenFile | None = None,
        session: aiohttp.ClientSession | None = None,
        *,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`ssl_context` verifies an https:// coordinator (coordinator_tls.client_context);
        without one, https:// URLs are verified against the system's roots."""
        self._base_url = base_url.rstrip("/")
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        # A TokenFile (a projected ServiceAccount token) is read again when the kubelet rotates it.
        self._token = token or None
        self._session = session
        self._owns_session = session is None
        self._request_timeout_ms = request_timeout_ms
        # SyncGroupRequest carries no rebalance timeout, yet a follower's sync is parked
        # until the leader's arrives (bounded by that timeout): remember it from the join.
        self._long_poll_ms = request_timeout_ms
        # (group id, member id) -> the leave key the server sent with that member's join
        # answer: a member token's LeaveGroup must carry it (docs/server.md).
        self._member_keys: dict[tuple[str, str], str] = {}

    async def join_group(self, request: JoinGroupRequest) -> JoinGroupResponse:
        self._long_poll_ms = max(
            self._request_timeout_ms, request.rebalance_timeout_ms + LONG_POLL_MARGIN_MS
        )
        headers: dict[str, str] = {}
        response = await self._post(
            request.group_id,
            "join",
            request,
            JoinGroupResponse,
            self._long_poll_ms,
            received_headers=headers,
        )
        key = headers.get(MEMBER_KEY_HEADER)
        if key and response.member_id:
            self._member_keys[(request.group_id, response.member_id)] = key
        return response

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        return await self._post(
            request.group_id, "sync", request, SyncGroupResponse, self._long_poll_ms
        )

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        return await self._post(request.group_id, "heartbeat", request, HeartbeatResponse)

    async def standby_heartbeat(self, request: StandbyHeartbeatRequest) -> StandbyHeartbeatResponse:
        headers: dict[str, str] = {}
        response = await self._post(
            request.group_id,
            "standby-heartbeat",
            request,
            StandbyHeartbeatResponse,
            received_headers=headers,
        )
        key = headers.get(MEMBER_KEY_HEADER)
        if key and response.promoted is not None:
            # The promoted standby is that member now: it may leave as one.
            self._member_keys[(request.group_id, response.promoted.member_id)] = key
        return response

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        headers: dict[str, str] = {}
        if len(request.members) == 1:
            key = self._member_keys.get((request.group_id, request.members[0].member_id))
            if key:
                headers[MEMBER_KEY_HEADER] = key
        return await self._post(
            request.group_id, "leave", request, LeaveGroupResponse, extra_headers=headers
        )

    async def commit_offsets(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        return await self._post(request.group_id, "offsets/commit", request, OffsetCommitResponse)

    async def fetch_offsets(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        return await self._post(request.group_id, "offsets/fetch", request, OffsetFetchResponse)

    async def topic_metadata(self) -> dict[str, int]:
        body = await self._request("GET", "/v1/topics", None, self._request_timeout_ms)
        topics = body.get("topics") if isinstance(body, dict) else None
        if not isinstance(topics, dict) or not all(
            isinstance(name, str) and isinstance(count, int) and not isinstance(count, bool)
            for name, count in topics.items()
        ):
            raise TransportError(f"GET /v1/topics returned an unexpected body: {body!r:.200}")
        return dict(topics)

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None

    async def _post(
        self,
        group_id: str,
        action: str,
        request: Any,
        response_type: type[R],
        timeout_ms: int | None = None,
        *,
        extra_headers: Mapping[str, str] | None = None,
        received_headers: dict[str, str] | None = None,
    ) -> R:
        path = f"/v1/groups/{quote(group_id, safe='')}/{action}"
        body = await self._request(
            "POST",
            path,
            to_json(request),
            timeout_ms or self._request_timeout_ms,
            extra_headers=extra_headers,
            received_headers=received_headers,
        )
        try:
            return from_json(response_type, body)
        except WireError as error:
            # A server that answers 200 with something else is broken or not ours.
            raise TransportError(f"POST {path}: unexpected response body ({error})") from None

    async def _request(
        self,
        method: str,
        path: str,
        payload: Any,
        timeout_ms: int,
        *,
        extra_headers: Mapping[str, str] | None = None,
        received_headers: dict[str, str] | None = None,
    ) -> Any:
        session = self._session_for_request()
        headers = {"Accept": "application/json", **(extra_headers or {})}
        token = self._token.current() if isinstance(self._token, TokenFile) else self._token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        timeout = aiohttp.ClientTimeout(total=timeout_ms / 1000)
        try:
            async with session.request(
                method,
                self._base_url + path,
                json=payload,
                headers=headers,
                timeout=timeout,
                ssl=self._ssl,
            ) as response:
                text = await response.text()
                status = response.status
                if received_headers is not None:
                    received_headers.update(response.headers)
        except aiohttp.ClientConnectorCertificateError as error:
            # We refused the coordinator's certificate: not retriable (an AccessError).
            raise refusal(self._base_url, error.certificate_error) from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise TransportError(
                f"{method} {path}: {type(error).__name__}: {error or 'no answer'}"
            ) from error
        if status >= 500 or status == 429:
            raise TransportError(f"{method} {path}: HTTP {status}: {text[:200]}")
        data = _parse_json(text)
        if status == 413:
            size = len(json.dumps(payload, separators=(",", ":"))) if payload is not None else 0
            raise RequestTooLargeError(
                f"{method} {path}: the coordinator refused a {size}-byte body as too large "
                f"(HTTP 413: {_message(data, text)}); raise its body limit "
                "(coordinator serve / operator run --max-body-bytes)"
            )
        if status >= 400:
            raise _refusal(method, path, status, data, text)
        if data is None:
            raise TransportError(f"{method} {path}: HTTP {status} without a JSON body")
        return data

    def _session_for_request(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            if not self._owns_session:
                raise TransportError("the aiohttp session given to HttpTransport is closed")
            self._session = aiohttp.ClientSession()
        return self._session


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def _message(data: Any, text: str) -> str:
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return text[:200]


def _refusal(method: str, path: str, status: int, data: Any, text: str) -> CoordinatorError:
    """A 4xx answer as the Kafka error the server named (or the closest one)."""
    code = ErrorCode.INVALID_REQUEST
    message = text[:200]
    if isinstance(data, dict):
        raw = data.get("error_code")
        if isinstance(raw, int) and not isinstance(raw, bool):
            try:
                code = ErrorCode(raw)
            except ValueError:
                code = ErrorCode.UNKNOWN_SERVER_ERROR
        message = str(data.get("message") or data.get("error") or message)
    elif status in (401, 403):
        code = ErrorCode.GROUP_AUTHORIZATION_FAILED
    return CoordinatorError(code, f"{method} {path}: HTTP {status}: {message}")
