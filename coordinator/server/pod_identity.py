"""Members known by their pod: a projected ServiceAccount token, reviewed, maps to the one
instance id that pod may hold (docs/server.md, "Members known by their pod"). Pure: the
TokenReview call itself is the caller's (an injected `Reviewer`), as is the clock.

A member pod presents a projected ServiceAccount token with the coordinator's own
audience. The API server's TokenReview says whether it is valid and, for a pod-bound
token, which pod it was issued to (`status.user.extra["authentication.kubernetes.io/
pod-name"]` and `pod-uid`). The operator knows which (group, instance id) each pod holds
(it stamps them on the pod), so a token maps to exactly one instance id: a holder of a
pod's token can no longer join as another instance.

Reviews are cached by the token's digest (heartbeats stay fast: one review per token per
`ttl_s`, and never past the token's own expiry), with a short negative cache so a flood of
bad tokens does not become a flood of TokenReviews.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"
POD_NAME_EXTRA: Final = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA: Final = "authentication.kubernetes.io/pod-uid"

# A TokenReview of `token` for `audiences`: the review's `status` as a plain mapping.
Reviewer = Callable[[str, tuple[str, ...]], Awaitable[Mapping[str, Any]]]


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """Who a reviewed token belongs to: a pod, by namespace, name and uid."""

    namespace: str
    service_account: str
    pod_name: str
    pod_uid: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a token is not a pod's: the reason goes into the 401's message and the log."""

    reason: str


@dataclass(frozen=True, slots=True)
class Binding:
    """What a pod may hold: its group and instance id (the operator stamps both on the pod),
    and its uid, so a token of a deleted pod does not pass for its same-named successor."""

    group_id: str
    instance_id: str
    pod_uid: str


def identity_from_review(status: Mapping[str, Any], audience: str) -> PodIdentity | Refused:
    """Read a TokenReview's status; a token that is not a live pod-bound ServiceAccount
    token for `audience` is refused, naming why."""
    if status.get("error"):
        return Refused(f"the token review failed: {status['error']}")
    if not status.get("authenticated"):
        return Refused("the API server does not accept the token (expired, revoked or forged)")
    audiences = status.get("audiences") or []
    if audience not in audiences:
        return Refused(f"the token is not for audience {audience!r} (it is for {audiences})")
    user = status.get("user") or {}
    username = str(user.get("username") or "")
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return Refused(f"{username!r} is not a ServiceAccount")
    namespace, _, account = username[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
    extra = user.get("extra") or {}
    names = extra.get(POD_NAME_EXTRA) or []
    uids = extra.get(POD_UID_EXTRA) or []
    if len(names) != 1 or len(uids) != 1:
        return Refused("the token is not bound to a pod (use a projected ServiceAccount token)")
    if not namespace or not account:
        return Refused(f"malformed ServiceAccount name {username!r}")
    return PodIdentity(namespace, account, str(names[0]), str(uids[0]))


def group_problem(
    identity: PodIdentity, bindings: Mapping[tuple[str, str], Binding], group_id: str
) -> str | None:
    """Why `identity` may not act on `group_id` at all (None: it may, as its instance id)."""
    binding = bindings.get((identity.namespace, identity.pod_name))
    pod = f"pod {identity.namespace}/{identity.pod_name}"
    if binding is None:
        return f"{pod} holds no instance id of any group"
    if binding.pod_uid != identity.pod_uid:
        return f"the token is of an earlier {pod} (uid {identity.pod_uid}), not the current one"
    if binding.group_id != group_id:
        return f"{pod} is a member of group {binding.group_id!r}, not {group_id!r}"
    return None


def instance_problem(
    identity: PodIdentity,
    bindings: Mapping[tuple[str, str], Binding],
    group_id: str,
    instance_id: str | None,
) -> str | None:
    """Why `identity` may not act as `instance_id` of `group_id` (None: it may)."""
    problem = group_problem(identity, bindings, group_id)
    if problem is not None:
        return problem
    binding = bindings[(identity.namespace, identity.pod_name)]
    pod = f"pod {identity.namespace}/{identity.pod_name}"
    if instance_id != binding.instance_id:
        return f"{pod} holds instance id {binding.instance_id!r}, not {instance_id!r}"
    return None


def token_expiry_s(token: str) -> float | None:
    """The `exp` claim of a JWT, unverified (the API server verifies it; this only bounds how
    long a review is cached). None when the token is not a readable JWT.

    Hand-written: decoding a JWT's payload is three lines, and a JWT library would be asked
    to skip the verification that is its purpose."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


class ReviewCache:
    """Reviews by token digest: a valid answer for `ttl_s` (never past the token's `exp`),
    a refusal for `negative_ttl_s`; at most `max_entries` (the oldest go first). `clock`
    gives seconds since the epoch (`time.time`), the scale of a JWT's `exp`."""

    def __init__(
        self,
        reviewer: Reviewer,
        audience: str,
        clock: Callable[[], float],
        *,
        ttl_s: float = 60.0,
        negative_ttl_s: float = 5.0,
        max_entries: int = 10_000,
    ) -> None:
        if ttl_s <= 0 or negative_ttl_s < 0 or max_entries < 1:
            raise ValueError("ttl_s must be positive, negative_ttl_s >= 0, max_entries >= 1")
        self._reviewer = reviewer
        self._audience = audience
        self._clock = clock
        self._ttl_s = ttl_s
        self._negative_ttl_s = negative_ttl_s
        self._max_entries = max_entries
        self._entries: OrderedDict[bytes, tuple[float, PodIdentity | Refused]] = OrderedDict()
        self.reviews = 0  # TokenReviews sent (tests, metrics)

    def cached(self, token: str) -> PodIdentity | Refused | None:
        """The cached answer for `token`, without reviewing (None: none, or expired): what
        the server's fast path may use, which cannot await a review."""
        cached = self._entries.get(hashlib.sha256(token.encode("utf-8")).digest())
        if cached is not None and self._clock() < cached[0]:
            return cached[1]
        return None

    async def identify(self, token: str) -> PodIdentity | Refused:
        key = hashlib.sha256(token.encode("utf-8")).digest()
        now = self._clock()
        cached = self._entries.get(key)
        if cached is not None and now < cached[0]:
            return cached[1]
        self.reviews += 1
        try:
            status = await self._reviewer(token, (self._audience,))
        except Exception as error:  # an unreachable API server refuses, and is not cached
            return Refused(f"the token could not be reviewed: {type(error).__name__}: {error}")
        result = identity_from_review(status, self._audience)
        if isinstance(result, Refused):
            until = now + self._negative_ttl_s
        else:
            until = now + self._ttl_s
            exp = token_expiry_s(token)
            if exp is not None:
                until = min(until, exp)
        self._entries[key] = (until, result)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
        return result


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts: what a ServiceAccount token is, and a configured bearer
    token (no dots needed) seldom is; only such tokens are sent to TokenReview."""
    return token.count(".") == 2


@dataclass(frozen=True, slots=True)
class PodAuth:
    """What the coordinator server needs to accept pods' tokens: the review cache and the
    (namespace, pod name) -> Binding table the operator keeps (a live view of its pods)."""

    cache: ReviewCache
    bindings: Mapping[tuple[str, str], Binding]
