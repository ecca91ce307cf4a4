"""Bearer tokens and roles, over HTTP and in the configuration parsers."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from coordinator import ErrorCode, HeartbeatRequest, LeaveGroupRequest, MemberIdentity
from coordinator.server import AuthConfig, AuthConfigError, Role, create_app
from coordinator.server.auth import Authenticator, bearer_token
from coordinator.wire import MEMBER_KEY_HEADER, to_json

from .conftest import (
    ADMIN_TOKEN,
    GROUP_A,
    GROUP_B,
    MEMBER_A_TOKEN,
    MEMBER_B_TOKEN,
    Server,
    start_test_server,
)
from .messages import join_body

AUTH_FAILED = ErrorCode.GROUP_AUTHORIZATION_FAILED


def _heartbeat(group_id: str) -> object:
    return to_json(HeartbeatRequest(group_id, 1, "someone", None))


async def test_missing_token_is_401(server: Server) -> None:
    reply = await server.call(
        "POST", f"/v1/groups/{GROUP_A}/heartbeat", _heartbeat(GROUP_A), token=None
    )
    assert reply.status == 401
    assert reply.body["error_code"] == AUTH_FAILED
    assert reply.body["error"] == "GROUP_AUTHORIZATION_FAILED"
    assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    reply = await server.call(
        "GET", "/v1/groups", token=None, headers={"Authorization": "Basic dXNlcjpwYXNz"}
    )
    assert reply.status == 401


async def test_wrong_token_is_403(server: Server) -> None:
    reply = await server.call("GET", "/v1/topics", token="not-a-token")
    assert reply.status == 403
    assert reply.body["error_code"] == AUTH_FAILED


async def test_member_token_on_another_group_is_403(server: Server) -> None:
    reply = await server.call(
        "POST", f"/v1/groups/{GROUP_B}/join", join_body(GROUP_B, "x"), token=MEMBER_A_TOKEN
    )
    assert reply.status == 403
    assert reply.body["error_code"] == AUTH_FAILED
    # Nothing reached the coordinator: the group does not exist.
    assert server.coordinator.group_state(GROUP_B) is None
    reply = await server.call(
        "POST", f"/v1/groups/{GROUP_B}/heartbeat", _heartbeat(GROUP_B), token=MEMBER_B_TOKEN
    )
    assert reply.status == 200


async def test_member_token_cannot_use_admin_routes(server: Server) -> None:
    for method, path, body in [
        ("GET", "/v1/groups", None),
        ("GET", f"/v1/groups/{GROUP_A}", None),
        ("DELETE", f"/v1/groups/{GROUP_A}", None),
        ("PUT", "/v1/topics", {"topics": {"t": 1}}),
        ("GET", "/v1/journal", None),
    ]:
        reply = await server.call(method, path, body, token=MEMBER_A_TOKEN)
        assert reply.status == 403, (method, path)
        assert reply.body["error_code"] == AUTH_FAILED
        reply = await server.call(method, path, body, token=ADMIN_TOKEN)
        assert reply.status == 200, (method, path, reply.text)
    assert await server.coordinator.topic_metadata() == {"t": 1}


async def test_member_may_leave_only_itself(server: Server) -> None:
    path = f"/v1/groups/{GROUP_A}/leave"
    batch = LeaveGroupRequest(GROUP_A, [MemberIdentity("m-1", "a-1"), MemberIdentity("m-2", "a-2")])
    by_instance_only = LeaveGroupRequest(GROUP_A, [MemberIdentity("", "a-1")])
    nobody = LeaveGroupRequest(GROUP_A, [])
    for request in (batch, by_instance_only, nobody):
        reply = await server.call("POST", path, to_json(request), token=MEMBER_A_TOKEN)
        assert reply.status == 403
        assert reply.body["error_code"] == AUTH_FAILED
    # A member id alone is not enough: the leader learns every member's id.
    itself = LeaveGroupRequest(GROUP_A, [MemberIdentity("m-1", "a-1")])
    reply = await server.call("POST", path, to_json(itself), token=MEMBER_A_TOKEN)
    assert reply.status == 403
    assert MEMBER_KEY_HEADER in reply.body["message"]
    # The admin's batch leave (by instance id, as the operator's scale-down sends it).
    admin_batch = LeaveGroupRequest(GROUP_A, [MemberIdentity("", "a-1"), MemberIdentity("", "a-2")])
    reply = await server.call("POST", path, to_json(admin_batch), token=ADMIN_TOKEN)
    assert reply.status == 200
    assert [member["group_instance_id"] for member in reply.body["members"]] == ["a-1", "a-2"]


async def _join_as(server: Server, instance_id: str) -> tuple[str, str]:
    """Join GROUP_A as a static member; its member id and the leave key of its answer."""
    reply = await server.call(
        "POST", f"/v1/groups/{GROUP_A}/join", join_body(GROUP_A, instance_id), token=MEMBER_A_TOKEN
    )
    assert reply.body["error"] == "NONE"
    return reply.body["member_id"], reply.headers[MEMBER_KEY_HEADER]


async def test_member_token_leaves_only_the_member_its_join_answer_named(server: Server) -> None:
    first, second = await asyncio.gather(_join_as(server, "a-1"), _join_as(server, "a-2"))
    (first_id, first_key), (second_id, second_key) = first, second
    assert first_key != second_key
    path = f"/v1/groups/{GROUP_A}/leave"

    def leave(member_id: str, instance_id: str) -> object:
        return to_json(LeaveGroupRequest(GROUP_A, [MemberIdentity(member_id, instance_id)]))

    # The first member knows the second's ids (a leader does), not its key.
    for key in (first_key, None, "", "x" * 43):
        headers = {MEMBER_KEY_HEADER: key} if key is not None else None
        reply = await server.call(
            "POST", path, leave(second_id, "a-2"), token=MEMBER_A_TOKEN, headers=headers
        )
        assert reply.status == 403, key
    described = await server.call("GET", f"/v1/groups/{GROUP_A}")
    assert len(described.body["members"]) == 2
    # Each member leaves itself with its own key.
    reply = await server.call(
        "POST",
        path,
        leave(second_id, "a-2"),
        token=MEMBER_A_TOKEN,
        headers={MEMBER_KEY_HEADER: second_key},
    )
    assert reply.status == 200
    assert reply.body["members"][0]["error"] == "NONE"
    # Keys come from the store's secret, so they hold across a restart of the server.
    await server.running.stop()
    running, _ = await start_test_server(server.db_path)
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{running.url}{path}",
                json=leave(first_id, "a-1"),
                headers={
                    "Authorization": f"Bearer {MEMBER_A_TOKEN}",
                    MEMBER_KEY_HEADER: first_key,
                },
            ) as response,
        ):
            # Admitted (what the coordinator then answers depends on the group's state).
            assert response.status == 200
    finally:
        await running.stop()


async def test_public_routes_need_no_token(server: Server) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        reply = await server.call("GET", path, token=None)
        assert reply.status == 200, path


async def test_insecure_server_admits_everyone(tmp_path: Path) -> None:
    running, _ = await start_test_server(tmp_path / "c.db", auth=AuthConfig(insecure=True))
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(running.url + "/v1/groups") as response,
        ):
            assert response.status == 200
    finally:
        await running.stop()


def test_no_tokens_and_not_insecure_refuses_to_start() -> None:
    from coordinator import GroupCoordinator

    with pytest.raises(AuthConfigError, match="no tokens configured"):
        create_app(GroupCoordinator(), AuthConfig())


def test_tokens_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(
        json.dumps({"admin": ["adm"], "members": {"g1": ["shared", "t1"], "g2": ["shared"]}})
    )
    config = AuthConfig.from_tokens_file(path)
    authenticator = Authenticator(config)
    admin = authenticator.authenticate("adm")
    assert admin is not None and admin.role is Role.ADMIN
    shared = authenticator.authenticate("shared")
    assert shared is not None and shared.role is Role.MEMBER
    assert shared.groups == {"g1", "g2"}
    assert authenticator.authenticate("t1").groups == {"g1"}  # type: ignore[union-attr]
    assert authenticator.authenticate("adm ") is None
    assert authenticator.authenticate("") is None


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps({"admin": "not-a-list"}),
        json.dumps({"admins": ["typo"]}),
        json.dumps({"members": {"g": [""]}}),
        json.dumps({"admin": ["has space"]}),
        json.dumps({"admin": ["same"], "members": {"g": ["same"]}}),
    ],
)
def test_bad_tokens_file_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(content)
    with pytest.raises(AuthConfigError):
        AuthConfig.from_tokens_file(path)


def test_environment_forms() -> None:
    config = AuthConfig.from_env(
        {
            "STATICFLEET_ADMIN_TOKEN": "a1,a2",
            "STATICFLEET_MEMBER_TOKEN": "orders:t1, team:with:colons:t2, bare",
            "STATICFLEET_GROUP_ID": "default-group",
        }
    )
    assert config.admin_tokens == {"a1", "a2"}
    assert config.member_tokens == {
        "orders": {"t1"},
        "team:with:colons": {"t2"},
        "default-group": {"bare"},
    }
    with pytest.raises(AuthConfigError, match="STATICFLEET_GROUP_ID"):
        AuthConfig.from_env({"STATICFLEET_MEMBER_TOKEN": "bare"})


def test_token_files_and_env_merge(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"members": {"g": ["file-token"]}}))
    config = AuthConfig.from_env(
        {"STATICFLEET_MEMBER_TOKEN": "g:env-token", "STATICFLEET_TOKENS_FILE": str(path)}
    )
    assert config.member_tokens == {"g": {"env-token", "file-token"}}


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Bearer", None),
        ("Basic abc", None),
    ],
)
def test_bearer_header(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token
