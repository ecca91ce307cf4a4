"""Member tokens added and removed at runtime (what the operator does per ConsumerGroup)."""

from __future__ import annotations

import threading

import pytest

from coordinator.server import AuthConfig, AuthConfigError, Role, authenticator_of
from coordinator.server.auth import Authenticator

from .conftest import ADMIN_TOKEN, GROUP_A, MEMBER_A_TOKEN, Server
from .messages import join_body

RUNTIME_TOKEN = "runtime-token-for-orders"


def _authenticator() -> Authenticator:
    return Authenticator(
        AuthConfig(
            admin_tokens=frozenset({ADMIN_TOKEN}),
            member_tokens={GROUP_A: frozenset({MEMBER_A_TOKEN})},
        )
    )


def test_set_member_tokens_adds_a_member_scoped_to_its_group() -> None:
    auth = _authenticator()
    assert auth.authenticate(RUNTIME_TOKEN) is None
    auth.set_member_tokens("orders", [RUNTIME_TOKEN])
    principal = auth.authenticate(RUNTIME_TOKEN)
    assert principal is not None and principal.role is Role.MEMBER
    assert principal.may_use_group("orders") and not principal.may_use_group(GROUP_A)
    assert auth.runtime_groups() == {"orders"}


def test_setting_again_replaces_the_groups_runtime_tokens() -> None:
    auth = _authenticator()
    auth.set_member_tokens("orders", ["old-token"])
    auth.set_member_tokens("orders", ["new-token"])
    assert auth.authenticate("old-token") is None
    assert auth.authenticate("new-token") is not None
    auth.set_member_tokens("orders", [])
    assert auth.authenticate("new-token") is None
    assert auth.runtime_groups() == frozenset()


def test_remove_group_forgets_runtime_tokens_but_keeps_configured_ones() -> None:
    auth = _authenticator()
    auth.set_member_tokens(GROUP_A, [RUNTIME_TOKEN])
    auth.set_member_tokens("orders", [RUNTIME_TOKEN])
    shared = auth.authenticate(RUNTIME_TOKEN)
    assert shared is not None and shared.groups == {GROUP_A, "orders"}
    auth.remove_group("orders")
    remaining = auth.authenticate(RUNTIME_TOKEN)
    assert remaining is not None and remaining.groups == {GROUP_A}
    auth.remove_group(GROUP_A)
    assert auth.authenticate(RUNTIME_TOKEN) is None
    # The configured token of that group was never runtime state.
    configured = auth.authenticate(MEMBER_A_TOKEN)
    assert configured is not None and configured.groups == {GROUP_A}
    auth.remove_group("never-added")  # a no-op


def test_runtime_tokens_are_validated() -> None:
    auth = _authenticator()
    with pytest.raises(AuthConfigError, match="admin token"):
        auth.set_member_tokens("orders", [ADMIN_TOKEN])
    with pytest.raises(AuthConfigError, match="non-empty group id"):
        auth.set_member_tokens("", [RUNTIME_TOKEN])
    with pytest.raises(AuthConfigError) as raised:
        auth.set_member_tokens("orders", ["has space"])
    assert "has space" not in str(raised.value)
    assert auth.authenticate(ADMIN_TOKEN) is not None
    assert auth.authenticate(ADMIN_TOKEN).is_admin  # type: ignore[union-attr]
    assert auth.runtime_groups() == frozenset()


def test_changes_from_threads_while_authenticating_never_lose_a_group() -> None:
    auth = _authenticator()
    errors: list[str] = []

    def churn(index: int) -> None:
        group, token = f"group-{index}", f"token-{index}"
        for _ in range(200):
            auth.set_member_tokens(group, [token])
            principal = auth.authenticate(token)
            if principal is None or group not in principal.groups:
                errors.append(group)
        auth.set_member_tokens(group, [token])

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert auth.runtime_groups() == {f"group-{i}" for i in range(8)}
    for i in range(8):
        assert auth.authenticate(f"token-{i}") is not None


async def test_runtime_token_over_http_then_removed(server: Server) -> None:
    authenticator = authenticator_of(server.running.runner.app)
    path = "/v1/groups/orders/join"
    reply = await server.call("POST", path, join_body("orders", "o-0"), token=RUNTIME_TOKEN)
    assert reply.status == 403

    authenticator.set_member_tokens("orders", [RUNTIME_TOKEN])
    reply = await server.call("POST", path, join_body("orders", "o-0"), token=RUNTIME_TOKEN)
    assert reply.status == 200, reply.text
    assert reply.body["error_code"] == 0
    # Scoped: the same token may not act on another group.
    other = f"/v1/groups/{GROUP_A}/join"
    reply = await server.call("POST", other, join_body(GROUP_A, "a-0"), token=RUNTIME_TOKEN)
    assert reply.status == 403

    authenticator.remove_group("orders")
    reply = await server.call("POST", path, join_body("orders", "o-1"), token=RUNTIME_TOKEN)
    assert reply.status == 403
