"""When Kopf has listed a watched kind: at start, and again whenever a watch cannot resume.

Kopf resumes a cut watch from its resourceVersion; when the API server no longer holds that
version (410 Gone) it LISTs the kind again. Its indices then keep every entry the LIST no
longer shows (observed.py says why that matters), and no handler is told that a listing
happened: an object's handlers see one `type=None` event per listed object, and an empty
listing (every object of the kind deleted while the watch was down, the case that matters
most) shows nothing at all.

Kopf's own stream does mark the end of each listing (`Bookmark.LISTED`, which it uses for
its readiness at start). `install()` wraps Kopf's private `watching.infinite_watch` (kopf
1.45.2; no setting or public hook reaches it) so that each end of a listing calls the
registered listeners with the kind's plural and namespace. tests/operator/test_relist.py
fails if a Kopf upgrade stops it from working.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from kopf._cogs.clients import watching

log = logging.getLogger("staticfleet.operator.relists")

# (plural, namespace or None for cluster-wide) -> whether the listener stays registered.
Listener = Callable[[str, str | None], bool]

_ORIGINAL: Final = watching.infinite_watch
_listeners: list[Listener] = []


async def _noticed_watch(*, resource: Any, namespace: Any, **kwargs: Any) -> AsyncIterator[Any]:
    async for event in _ORIGINAL(resource=resource, namespace=namespace, **kwargs):
        if event is watching.Bookmark.LISTED:
            for listener in list(_listeners):
                try:
                    stays = listener(str(resource.plural), namespace)
                except Exception:  # a listener's bug must not end Kopf's watch of the kind
                    log.exception("a listener of Kopf's listings failed")
                    continue
                if not stays:
                    _listeners.remove(listener)
        yield event


def add_listener(listener: Listener) -> None:
    """`listener(plural, namespace)` after each listing until it answers False."""
    _listeners.append(listener)


def install() -> None:
    """Idempotent: handlers.register calls it, before Kopf starts."""
    watching.infinite_watch = _noticed_watch


def installed() -> bool:
    return watching.infinite_watch is _noticed_watch
