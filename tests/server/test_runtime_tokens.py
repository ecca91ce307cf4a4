"""Member tokens added and removed at runtime (what the operator does per ConsumerGroup)."""

from __future__ import annotations

import random
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


def test_runtime_changes_leave_the_table_a_fresh_one_would_build() -> None:
    """The table is updated per change (not rebuilt): after any sequence of changes it maps
    every token to the groups a table built from scratch gives it, configured ones kept."""
    rng = random.Random(26)
    auth = _authenticator()
    runtime: dict[str, frozenset[str]] = {}
    groups = [GROUP_A, "orders", "payments", "audit"]
    tokens = [MEMBER_A_TOKEN, "token-1", "token-2", "token-3", "token-4"]
    for _ in range(400):
        group = rng.choice(groups)
        if rng.random() < 0.2:
            auth.remove_group(group)
            runtime.pop(group, None)
            continue
        wanted = frozenset(rng.sample(tokens, rng.randint(0, 3)))
        auth.set_member_tokens(group, wanted)
        if wanted:
            runtime[group] = wanted
        else:
            runtime.pop(group, None)
        members = {GROUP_A: {MEMBER_A_TOKEN}}
        for group_id, held in runtime.items():
            members.setdefault(group_id, set()).update(held)
        fresh = Authenticator(
            AuthConfig(
                admin_tokens=frozenset({ADMIN_TOKEN}),
                member_tokens={g: frozenset(t) for g, t in members.items()},
            )
        )
        for token in [*tokens, ADMIN_TOKEN]:
            assert auth.authenticate(token) == fresh.authenticate(token), token


def test_a_groups_change_digests_only_its_own_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registering one group's token costs the same with 1,000 groups registered as with
    none (an operator's restart registers every group's: it was quadratic)."""
    from coordinator.server import auth as auth_module

    auth = _authenticator()
    for i in range(1000):
        auth.set_member_tokens(f"group-{i}", [f"token-{i}"])
    digested: list[str] = []
    real = auth_module._digest

    def counted(token: str) -> bytes:
        digested.append(token)
        return real(token)

    monkeypatch.setattr(auth_module, "_digest", counted)
    auth.set_member_tokens("group-1000", ["token-1000"])
    auth.set_member_tokens("group-7", ["token-7b"])
    auth.remove_group("group-8")
    assert sorted(digested) == ["token-1000", "token-7", "token-7b", "token-8"]
    assert auth.authenticate("token-7") is None and auth.authenticate("token-8") is None
    assert auth.authenticate("token-999") is not None


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
