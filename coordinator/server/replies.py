"""Successful JSON answers: a message dataclass through `coordinator.wire`."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from coordinator.wire import encode


def reply(message: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        body=encode(message),
        content_type="application/json",
        charset="utf-8",
    )
