"""Members known by their pod: the pure mapping from a reviewed token to one instance id,
and the review cache (coordinator/server/pod_identity.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest

from coordinator.server.pod_identity import (
    POD_NAME_EXTRA,
    POD_UID_EXTRA,
    Binding,
    PodIdentity,
    Refused,
    ReviewCache,
    identity_from_review,
    instance_problem,
    token_expiry_s,
)

AUDIENCE = "staticfleet-coordinator"


def review(
    pod: str = "orders-0",
    uid: str = "uid-0",
    *,
    namespace: str = "team",
    authenticated: bool = True,
    audiences: tuple[str, ...] = (AUDIENCE,),
) -> dict[str, Any]:
    return {
        "authenticated": authenticated,
        "audiences": list(audiences),
        "user": {
            "username": f"system:serviceaccount:{namespace}:orders",
            "uid": "sa-uid",
            "extra": {POD_NAME_EXTRA: [pod], POD_UID_EXTRA: [uid]},
        },
    }


BINDINGS = {
    ("team", "orders-0"): Binding("orders", "orders-0", "uid-0"),
    ("team", "orders-1"): Binding("orders", "orders-1", "uid-1"),
}


def test_a_pod_token_maps_to_the_one_instance_id_its_pod_holds():
    identity = identity_from_review(review(), AUDIENCE)
    assert identity == PodIdentity("team", "orders", "orders-0", "uid-0")
    assert isinstance(identity, PodIdentity)
    assert instance_problem(identity, BINDINGS, "orders", "orders-0") is None


def test_another_pods_token_is_refused_that_instance_id():
    identity = identity_from_review(review("orders-1", "uid-1"), AUDIENCE)
    assert isinstance(identity, PodIdentity)
    problem = instance_problem(identity, BINDINGS, "orders", "orders-0")
    assert problem == "pod team/orders-1 holds instance id 'orders-1', not 'orders-0'"
    assert "not 'payments'" in str(instance_problem(identity, BINDINGS, "payments", "orders-1"))
    unbound = identity_from_review(review("stranger", "uid-9"), AUDIENCE)
    assert isinstance(unbound, PodIdentity)
    assert "holds no instance id" in str(instance_problem(unbound, BINDINGS, "orders", "x"))
    # A dynamic join (no instance id) from a static pod is refused too.
    assert instance_problem(identity, BINDINGS, "orders", None) is not None


def test_a_token_of_a_deleted_pod_does_not_pass_for_its_successor():
    old = identity_from_review(review("orders-0", "uid-old"), AUDIENCE)
    assert isinstance(old, PodIdentity)
    assert "earlier pod" in str(instance_problem(old, BINDINGS, "orders", "orders-0"))


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (review(authenticated=False), "does not accept"),
        (review(audiences=("https://kubernetes.default.svc",)), "not for audience"),
        (
            {"authenticated": True, "audiences": [AUDIENCE], "user": {"username": "alice"}},
            "not a ServiceAccount",
        ),
        (
            {
                "authenticated": True,
                "audiences": [AUDIENCE],
                "user": {"username": "system:serviceaccount:team:orders"},
            },
            "not bound to a pod",
        ),
        ({"error": "token lookup failed"}, "review failed"),
    ],
)
def test_tokens_that_are_not_a_live_pods_are_refused_naming_why(status, reason):
    refused = identity_from_review(status, AUDIENCE)
    assert isinstance(refused, Refused)
    assert reason in refused.reason


def jwt(claims: Mapping[str, Any]) -> str:
    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return ".".join([part(b'{"alg":"RS256"}'), part(json.dumps(claims).encode()), "sig"])


def test_token_expiry_is_read_from_the_jwt_and_nothing_else():
    assert token_expiry_s(jwt({"exp": 1_800_000_000, "aud": [AUDIENCE]})) == 1_800_000_000
    assert token_expiry_s("opaque-token") is None
    assert token_expiry_s("a.!!!.c") is None
    assert token_expiry_s(jwt({"exp": True})) is None


class Reviews:
    def __init__(self, answers: Mapping[str, Mapping[str, Any]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    async def __call__(self, token: str, audiences: tuple[str, ...]) -> Mapping[str, Any]:
        self.calls.append((token, audiences))
        if token not in self.answers:
            raise ConnectionError("API server unreachable")
        return self.answers[token]


async def test_reviews_are_cached_so_heartbeats_stay_fast():
    now = [1_000.0]
    good = jwt({"exp": 1_030})  # expires before the cache's 60 s
    reviews = Reviews({good: review(), "bad": review(authenticated=False)})
    cache = ReviewCache(reviews, AUDIENCE, lambda: now[0], ttl_s=60, negative_ttl_s=5)
    for _ in range(100):  # a heartbeat's worth of requests: one review
        assert isinstance(await cache.identify(good), PodIdentity)
    assert reviews.calls == [(good, (AUDIENCE,))]
    now[0] = 1_029.0
    await cache.identify(good)
    assert len(reviews.calls) == 1
    now[0] = 1_030.0  # the token's own expiry ends the cached answer
    await cache.identify(good)
    assert len(reviews.calls) == 2

    assert isinstance(await cache.identify("bad"), Refused)
    assert isinstance(await cache.identify("bad"), Refused)
    assert len(reviews.calls) == 3  # refusals cached briefly
    now[0] += 5
    await cache.identify("bad")
    assert len(reviews.calls) == 4


async def test_an_unreachable_api_server_refuses_and_is_asked_again():
    reviews = Reviews({})
    cache = ReviewCache(reviews, AUDIENCE, lambda: 0.0)
    first = await cache.identify("t")
    assert isinstance(first, Refused) and "could not be reviewed" in first.reason
    await cache.identify("t")
    assert len(reviews.calls) == 2


async def test_the_cache_is_bounded():
    tokens = {f"t{i}": review() for i in range(5)}
    reviews = Reviews(tokens)
    cache = ReviewCache(reviews, AUDIENCE, lambda: 0.0, max_entries=3)
    for token in tokens:
        await cache.identify(token)
    await cache.identify("t0")  # evicted as the oldest: reviewed again
    assert len(reviews.calls) == 6
    with pytest.raises(ValueError):
        ReviewCache(reviews, AUDIENCE, lambda: 0.0, ttl_s=0)
