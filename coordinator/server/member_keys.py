"""Leave keys: what binds a member token's LeaveGroup to the member that sent it.

Kafka has no per-member credentials, and all members of a group usually share one token,
so the token alone cannot say which member is calling. The member ids are no secret
either: the group's leader receives every member's id to assign partitions. So the server
gives each member, in the `Staticfleet-Member-Key` header of its own JoinGroup answer, a key
derived from its member id (HMAC-SHA256 with a secret kept in the store, so keys survive a
restart of the coordinator); a LeaveGroup with a member token must present the key of the
one member it names. Admin tokens need no key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from coordinator.errors import ErrorCode
from coordinator.messages import JoinGroupResponse
from coordinator.wire import MEMBER_KEY_HEADER

__all__ = ["MEMBER_KEY_HEADER", "MemberKeys", "join_key"]


class MemberKeys:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def key_for(self, group_id: str, member_id: str) -> str:
        message = (
            group_id.encode("utf-8", "surrogatepass")
            + b"\0"
            + member_id.encode("utf-8", "surrogatepass")
        )
        digest = hmac.new(self._secret, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")

    def matches(self, group_id: str, member_id: str, presented: str | None) -> bool:
        if not presented:
            return False
        expected = self.key_for(group_id, member_id)
        return hmac.compare_digest(
            expected.encode("ascii"), presented.encode("utf-8", "surrogateescape")
        )


def join_key(keys: MemberKeys | None, group_id: str, response: JoinGroupResponse) -> str | None:
    """The leave key a JoinGroup answer carries, if any: only a join that made the caller
    this member (or gave it its new id) earns one; a refused join echoes whatever member id
    it was sent. Both the fast path and aiohttp's handler answer with it."""
    issued = response.error_code in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED)
    if not issued or not response.member_id or keys is None:
        return None
    return keys.key_for(group_id, response.member_id)
