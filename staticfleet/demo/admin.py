"""The admin calls the demo makes against the coordinator, as the operator would.

Plain blocking HTTP (urllib): the demo drives processes one step at a time, and this keeps
it free of an event loop.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from typing import Any, cast

Partition = tuple[str, int]


class AdminError(RuntimeError):
    """The coordinator could not be reached or refused the request."""


class AdminClient:
    def __init__(self, base_url: str, token: str, timeout_s: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._timeout_s = timeout_s

    def _request(self, method: str, path: str, body: object | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            raise AdminError(f"{method} {path}: HTTP {error.code}: {detail}") from error
        except (OSError, ValueError) as error:
            raise AdminError(f"{method} {path}: {error}") from error

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base_url + "/readyz", timeout=self._timeout_s):
                return True
        except (OSError, ValueError):
            return False

    def set_topics(self, topics: dict[str, int]) -> dict[str, int]:
        answer = self._request("PUT", "/v1/topics", {"topics": topics})
        return cast(dict[str, int], answer["topics"])

    def describe(self, group_id: str) -> dict[str, Any]:
        quoted = urllib.parse.quote(group_id, safe="")
        return cast(dict[str, Any], self._request("GET", f"/v1/groups/{quoted}"))

    def journal(self, group_id: str, page_size: int = 5000) -> list[dict[str, Any]]:
        """Every journal row of a group, oldest first."""
        rows: list[dict[str, Any]] = []
        since = 0
        while True:
            query = urllib.parse.urlencode(
                {"group_id": group_id, "since": since, "limit": page_size}
            )
            page = self._request("GET", f"/v1/journal?{query}")
            events = cast(list[dict[str, Any]], page["events"])
            rows.extend(events)
            if len(events) < page_size:
                return rows
            since = int(page["next_since"])

    def leave(self, group_id: str, instance_ids: Iterable[str], reason: str) -> dict[str, Any]:
        """Batch LeaveGroup by instance id (KIP-345): what the operator sends on scale-down."""
        body = {
            "group_id": group_id,
            "members": [
                {"member_id": "", "group_instance_id": instance_id, "reason": reason}
                for instance_id in instance_ids
            ],
        }
        quoted = urllib.parse.quote(group_id, safe="")
        return cast(dict[str, Any], self._request("POST", f"/v1/groups/{quoted}/leave", body))

    def expect(self, group_id: str, instance_ids: Iterable[str], timeout_ms: int) -> dict[str, Any]:
        """Register the group's expected members (what the operator does before a scale-up):
        the coordinator holds the join phase until they have all joined."""
        body = {"instance_ids": list(instance_ids), "timeout_ms": timeout_ms}
        quoted = urllib.parse.quote(group_id, safe="")
        path = f"/v1/groups/{quoted}/expected-members"
        return cast(dict[str, Any], self._request("PUT", path, body))

    def standbys(self, group_id: str) -> list[str]:
        """The group's hot standbys the coordinator hears from."""
        quoted = urllib.parse.quote(group_id, safe="")
        answer = self._request("GET", f"/v1/groups/{quoted}/standbys")
        return [str(standby) for standby in answer["standby_ids"]]

    def promote(self, group_id: str, standby_id: str, instance_id: str) -> dict[str, Any]:
        """Promote a hot standby into a missing member's instance id (what the operator does
        when the member's pod is gone): same assignment, no rebalance."""
        quoted = urllib.parse.quote(group_id, safe="")
        body = {"standby_id": standby_id, "instance_id": instance_id}
        return cast(dict[str, Any], self._request("POST", f"/v1/groups/{quoted}/promotions", body))

    def committed_offsets(self, group_id: str) -> dict[Partition, int]:
        """Every committed offset of a group (OffsetFetch with no partition list)."""
        quoted = urllib.parse.quote(group_id, safe="")
        answer = self._request("POST", f"/v1/groups/{quoted}/offsets/fetch", {"group_id": group_id})
        if int(answer.get("error_code", 0)) != 0:
            raise AdminError(f"offset fetch for {group_id}: {answer.get('error')}")
        return {
            (str(item["topic"]), int(item["partition"])): int(item["committed_offset"])
            for item in answer["partitions"]
            if int(item.get("error_code", 0)) == 0 and int(item["committed_offset"]) >= 0
        }
