"""Bearer tokens and the two roles: *admin* (everything) and *member* (its own groups).

Tokens come from a JSON tokens file and/or the environment (see `docs/server.md`):

    {"admin": ["admin-token"], "members": {"group-a": ["tok-a"], "group-b": ["tok-a", "tok-b"]}}

A token listed under several groups may act on all of them. A token may not be both admin
and member: that is almost certainly a copy-paste mistake, so the configuration is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from coordinator.server.pod_identity import PodIdentity

ENV_ADMIN_TOKEN = "STATICFLEET_ADMIN_TOKEN"
ENV_MEMBER_TOKEN = "STATICFLEET_MEMBER_TOKEN"
ENV_GROUP_ID = "STATICFLEET_GROUP_ID"
ENV_TOKENS_FILE = "STATICFLEET_TOKENS_FILE"

# RFC 6750 token68 characters. Keeping ':' and ',' out of tokens is what makes the
# `group:token,group:token` environment form unambiguous (group ids may contain ':').
_TOKEN_SYNTAX = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class AuthConfigError(ValueError):
    """The token configuration is unusable; the message says how to fix it."""


class Role(StrEnum):
    ADMIN = "admin"
    MEMBER = "member"


@dataclass(frozen=True, slots=True)
class Principal:
    role: Role
    # The groups a member token may act on; empty (and unused) for admins.
    groups: frozenset[str] = frozenset()
    # A member known by its pod's reviewed ServiceAccount token (pod_identity.py): it may act
    # only as the one instance id its pod holds. None: a group token (any instance id).
    pod: PodIdentity | None = None

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    def may_use_group(self, group_id: str) -> bool:
        return self.is_admin or group_id in self.groups


ADMIN = Principal(Role.ADMIN)


@dataclass(frozen=True, slots=True)
class AuthConfig:
    admin_tokens: frozenset[str] = frozenset()
    # group id -> tokens allowed to act on that group
    member_tokens: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # No authentication at all: every caller is admin. Only ever set explicitly.
    insecure: bool = False

    def __post_init__(self) -> None:
        for token in self.admin_tokens:
            _check_token(token, "admin token")
        for group_id, tokens in self.member_tokens.items():
            if not group_id:
                raise AuthConfigError("member tokens need a non-empty group id")
            for token in tokens:
                _check_token(token, f"member token for group {group_id!r}")
        both = self.admin_tokens & self.member_groups_by_token().keys()
        if both:
            raise AuthConfigError(
                f"{len(both)} token(s) are configured both as admin and as member tokens; "
                "give each role its own token"
            )

    @property
    def has_tokens(self) -> bool:
        return bool(self.admin_tokens) or any(self.member_tokens.values())

    def member_groups_by_token(self) -> dict[str, frozenset[str]]:
        groups: dict[str, set[str]] = {}
        for group_id, tokens in self.member_tokens.items():
            for token in tokens:
                groups.setdefault(token, set()).add(group_id)
        return {token: frozenset(ids) for token, ids in groups.items()}

    def merged(self, other: AuthConfig) -> AuthConfig:
        members: dict[str, frozenset[str]] = dict(self.member_tokens)
        for group_id, tokens in other.member_tokens.items():
            members[group_id] = members.get(group_id, frozenset()) | tokens
        return AuthConfig(
            admin_tokens=self.admin_tokens | other.admin_tokens,
            member_tokens=members,
            insecure=self.insecure or other.insecure,
        )

    def check_usable(self) -> None:
        """Refuse to serve with nothing configured: an open coordinator is never an accident."""
        if not self.insecure and not self.has_tokens:
            raise AuthConfigError(
                "no tokens configured: give --tokens-file, --admin-token/--member-token, or "
                f"{ENV_ADMIN_TOKEN}/{ENV_MEMBER_TOKEN}; or pass --insecure to run without "
                "authentication (local use only)"
            )

    @classmethod
    def from_tokens_file(cls, path: str | Path) -> AuthConfig:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise AuthConfigError(f"cannot read tokens file {path}: {error}") from None
        try:
            parsed = _TokensFile.model_validate_json(text)
        except ValidationError as error:
            raise AuthConfigError(f"tokens file {path} is invalid: {error}") from None
        return cls(
            admin_tokens=frozenset(parsed.admin),
            member_tokens={group: frozenset(tokens) for group, tokens in parsed.members.items()},
        )

    @classmethod
    def from_values(
        cls,
        admin_tokens: Iterable[str] = (),
        member_specs: Iterable[str] = (),
        default_group: str | None = None,
    ) -> AuthConfig:
        """From flag/environment strings: member specs are `group:token` or a bare token
        scoped to `default_group`; each string may hold several, comma-separated."""
        admins = frozenset(token for value in admin_tokens for token in _split_list(value))
        members: dict[str, set[str]] = {}
        for value in member_specs:
            for spec in _split_list(value):
                group_id, token = _parse_member_spec(spec, default_group)
                members.setdefault(group_id, set()).add(token)
        return cls(
            admin_tokens=admins,
            member_tokens={group: frozenset(tokens) for group, tokens in members.items()},
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> AuthConfig:
        config = cls.from_values(
            admin_tokens=[environ[ENV_ADMIN_TOKEN]] if environ.get(ENV_ADMIN_TOKEN) else [],
            member_specs=[environ[ENV_MEMBER_TOKEN]] if environ.get(ENV_MEMBER_TOKEN) else [],
            default_group=environ.get(ENV_GROUP_ID) or None,
        )
        tokens_file = environ.get(ENV_TOKENS_FILE)
        if tokens_file:
            config = config.merged(cls.from_tokens_file(tokens_file))
        return config


class _TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    admin: list[str] = []
    members: dict[str, list[str]] = {}


def _split_list(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _parse_member_spec(spec: str, default_group: str | None) -> tuple[str, str]:
    group_id, colon, token = spec.rpartition(":")
    if colon:
        if not group_id:
            raise AuthConfigError("a member token spec ':<token>' has an empty group id")
        return group_id, token
    if default_group is None:
        raise AuthConfigError(
            f"a member token without a group needs {ENV_GROUP_ID}; or write it as group:token"
        )
    return default_group, spec


def is_well_formed(token: str) -> bool:
    """Whether `token` has the RFC 6750 syntax every configured token has."""
    return _TOKEN_SYNTAX.fullmatch(token) is not None


def _check_token(token: str, what: str) -> None:
    if not is_well_formed(token):
        # Never echo the token itself: it may be a real secret with a typo.
        raise AuthConfigError(
            f"an {what} is empty or has characters outside A-Z a-z 0-9 - . _ ~ + / ="
        )


def _digest(token: str) -> bytes:
    # Comparing fixed-size digests keeps the comparison time independent of token length too.
    return hashlib.sha256(token.encode("utf-8")).digest()


class Authenticator:
    """Maps a presented bearer token to a principal, by its digest.

    The configured tokens are fixed; member tokens may also be added and removed at runtime
    per group (`set_member_tokens` / `remove_group`, e.g. by the operator embedding the
    server). A change builds a new table (token digest -> principal) and swaps it in with one
    assignment, so `authenticate` (on the event loop or any thread) always sees one whole
    table; changes are serialized by a lock. Runtime tokens add to a group's configured
    tokens, never replace them.
    """

    def __init__(self, config: AuthConfig) -> None:
        self.insecure = config.insecure
        self._admin_tokens = config.admin_tokens
        self._configured: dict[str, frozenset[str]] = {
            group_id: frozenset(tokens) for group_id, tokens in config.member_tokens.items()
        }
        self._runtime: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()
        # Member token -> the groups it is valid for (configured and runtime alike): a
        # change touches only its own tokens' entries. Rebuilding the whole table instead
        # made an operator's restart quadratic in its groups (each group's token registered
        # once: 1,000 rebuilds of 1,000 digests; docs/performance.md, "Restart to ready").
        self._groups_of: dict[str, set[str]] = {}
        for group_id, tokens in self._configured.items():
            for token in tokens:
                self._groups_of.setdefault(token, set()).add(group_id)
        self._entries: dict[bytes, Principal] = {
            _digest(token): ADMIN for token in sorted(self._admin_tokens)
        }
        for token, ids in sorted(self._groups_of.items()):
            self._entries[_digest(token)] = Principal(Role.MEMBER, frozenset(ids))

    def _swap(self, group_id: str, before: frozenset[str], after: frozenset[str]) -> None:
        """`group_id`'s runtime tokens went from `before` to `after`: update the tokens that
        changed, in a copy of the table swapped in with one assignment (under `_lock`)."""
        configured = self._configured.get(group_id, frozenset())
        changed = (before ^ after) - configured
        if not changed:
            return
        entries = dict(self._entries)
        for token in changed:
            ids = self._groups_of.setdefault(token, set())
            if token in after:
                ids.add(group_id)
            else:
                ids.discard(group_id)
            if ids:
                entries[_digest(token)] = Principal(Role.MEMBER, frozenset(ids))
            else:
                del self._groups_of[token]
                entries.pop(_digest(token), None)
        self._entries = entries

    def set_member_tokens(self, group_id: str, tokens: Iterable[str]) -> None:
        """Make `tokens` (and no other runtime tokens) valid member tokens for `group_id`.
        Raises `AuthConfigError` for an empty group id, a malformed token, or an admin
        token (a token is never both)."""
        wanted = frozenset(tokens)
        if not group_id:
            raise AuthConfigError("member tokens need a non-empty group id")
        for token in wanted:
            _check_token(token, f"member token for group {group_id!r}")
        if wanted & self._admin_tokens:
            raise AuthConfigError(
                f"a member token for group {group_id!r} is also an admin token; "
                "give each role its own token"
            )
        with self._lock:
            before = self._runtime.get(group_id, frozenset())
            if wanted:
                self._runtime[group_id] = wanted
            else:
                self._runtime.pop(group_id, None)
            self._swap(group_id, before, wanted)

    def remove_group(self, group_id: str) -> None:
        """Forget the runtime member tokens of `group_id` (its configured ones stay)."""
        with self._lock:
            before = self._runtime.pop(group_id, None)
            if before is not None:
                self._swap(group_id, before, frozenset())

    def runtime_groups(self) -> frozenset[str]:
        """The groups that have runtime member tokens."""
        with self._lock:
            return frozenset(self._runtime)

    def authenticate(self, token: str) -> Principal | None:
        if not is_well_formed(token):
            # Never a configured token (those are checked for this syntax), and the syntax is
            # public, so refusing before comparing reveals nothing. Also keeps characters that
            # UTF-8 cannot encode (undecodable header bytes) away from the digest.
            return None
        presented = _digest(token)
        # One lookup by the presented token's SHA-256 digest (the table is one snapshot: a
        # change swaps the whole dict). What its timing can reveal is about the digest of
        # what the caller sent, which the caller knows anyway, never about a configured
        # token (a preimage of a digest prefix is out of reach). A constant-time scan of
        # every entry cost a heartbeat 4% of its time with 200 groups' tokens (issue 13).
        return self._entries.get(presented)


def bearer_token(authorization: str | None) -> str | None:
    """The token from an `Authorization: Bearer <token>` header; None when absent/other scheme."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = token.strip()
    return token or None


def describe(config: AuthConfig) -> str:
    """A log line about the configuration that reveals no token."""
    if config.insecure:
        return "authentication disabled (--insecure)"
    groups = sorted(config.member_tokens)
    return (
        f"{len(config.admin_tokens)} admin token(s), member tokens for "
        f"{len(groups)} group(s): {json.dumps(groups)}"
    )
