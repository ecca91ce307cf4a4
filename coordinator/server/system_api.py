"""Probes, metrics and the API document: no token needed, cheap to answer."""

from __future__ import annotations

from aiohttp import web

from coordinator.server.context import context_of
from coordinator.server.metrics import CONTENT_TYPE
from coordinator.server.models import Status
from coordinator.server.replies import reply


async def healthz(request: web.Request) -> web.Response:
    # The process is alive and its loop answers; nothing more (that is /readyz).
    return reply(Status("ok"))


async def readyz(request: web.Request) -> web.Response:
    if context_of(request).ready:
        return reply(Status("ready"))
    return reply(Status("not ready"), status=503)


async def metrics(request: web.Request) -> web.Response:
    context = context_of(request)
    if context.ready:
        await context.metrics.refresh(context.coordinator)
    response = web.Response(body=context.metrics.exposition())
    # Set whole: the exposition content type carries a version parameter aiohttp would
    # otherwise split off.
    response.headers["Content-Type"] = CONTENT_TYPE
    return response


async def openapi_document(request: web.Request) -> web.Response:
    # Imported here: the document is built from the route table, which imports this module.
    from coordinator.server.openapi import render_openapi

    return web.Response(text=render_openapi(), content_type="application/json")
