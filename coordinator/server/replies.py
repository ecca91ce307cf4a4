"""Successful JSON answers: a message dataclass through `coordinator.wire`."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from coordinator.wire import to_json


def reply(message: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps(to_json(message), separators=(",", ":")),
        content_type="application/json",
    )
