"""The pass runner (coalescing, requeue, retry) and the overlay of the operator's own
writes on the watched stores (read your writes)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import itertools
import weakref
from typing import Any

import kopf

from staticfleet_operator.group_ref import GroupRef
from staticfleet_operator.informer import MEMBER_PODS, OPAQUE_SECRETS, Informer
from staticfleet_operator.kube import KubeApi
from staticfleet_operator.observed import OVERLAY_SECONDS, Observed
from staticfleet_operator.owned import GROUP_LABEL
from staticfleet_operator.passes import Passes

NS = "default"


async def _settle(runner: Passes) -> None:
    for _ in range(200):
        if runner.running == 0 and runner.due == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("passes did not settle")


async def test_requests_during_a_pass_coalesce_into_one_more_pass() -> None:
    calls: list[str] = []
    gate = asyncio.Event()

    async def run(namespace: str, name: str) -> bool:
        calls.append(name)
        await gate.wait()
        return False

    runner = Passes(run, requeue_seconds=60)
    runner.request(NS, "a")
    await asyncio.sleep(0.01)
    for _ in range(5):  # five events while the first pass runs
        runner.request(NS, "a")
    gate.set()
    await _settle(runner)
    assert calls == ["a", "a"]


async def test_a_pass_that_is_not_done_is_requeued_and_a_settled_one_is_not() -> None:
    answers = {"busy": [True, True, False], "settled": [False]}
    calls: list[str] = []

    async def run(namespace: str, name: str) -> bool:
        calls.append(name)
        return answers[name].pop(0)

    runner = Passes(run, requeue_seconds=0.02)
    runner.request(NS, "busy")
    runner.request(NS, "settled")
    await asyncio.sleep(0.3)
    await _settle(runner)
    assert calls.count("busy") == 3 and calls.count("settled") == 1


async def test_a_failed_pass_is_retried_and_a_stopped_runner_runs_nothing() -> None:
    calls: list[str] = []

    async def run(namespace: str, name: str) -> bool:
        calls.append(name)
        if len(calls) == 1:
            raise RuntimeError("the API server hiccuped")
        return False

    runner = Passes(run, requeue_seconds=60)
    runner.request(NS, "a")
    await asyncio.sleep(1.3)  # RETRY_SECONDS after the failure
    assert calls == ["a", "a"]
    await runner.close()
    runner.request(NS, "a")
    await asyncio.sleep(0.05)
    assert calls == ["a", "a"]


async def test_of_two_delayed_requests_the_sooner_wins() -> None:
    calls: list[float] = []
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def run(namespace: str, name: str) -> bool:
        calls.append(loop.time() - started)
        return False

    runner = Passes(run, requeue_seconds=60)
    runner.request(NS, "a", delay=30)  # the expected members' deadline, say
    runner.request(NS, "a", delay=0.05)  # a requeue: must not wait behind it
    await asyncio.sleep(0.3)
    assert len(calls) == 1 and calls[0] < 1
    runner.request(NS, "a", delay=0.05)
    runner.request(NS, "a", delay=30)  # the later request does not push the sooner back
    await asyncio.sleep(0.3)
    assert len(calls) == 2
    await runner.close()


class _Cause:
    """Stands for what Kopf keeps in its handler's context: the cause, with the object."""


_CAUSE: contextvars.ContextVar[_Cause] = contextvars.ContextVar("cause")


async def test_passes_and_their_timers_do_not_keep_the_requesters_context() -> None:
    """A request from a handler (here: a context holding a cause, as Kopf's handlers run in)
    leaves nothing of that context in the pass or in a timer armed for an hour."""
    seen: list[_Cause | None] = []

    async def run(namespace: str, name: str) -> bool:
        seen.append(_CAUSE.get(None))
        return False

    runner = Passes(run, requeue_seconds=60)

    def handler() -> weakref.ref[_Cause]:
        cause = _Cause()
        _CAUSE.set(cause)
        runner.request(NS, "now")
        runner.request(NS, "later", delay=3600)
        return weakref.ref(cause)

    held = contextvars.copy_context().run(handler)
    await _settle_running(runner)
    gc.collect()
    assert seen == [None]  # the pass did not run in the handler's context
    assert runner.due == 1  # the hour's timer is armed ...
    assert held() is None  # ... and holds nothing of the handler's
    await runner.close()


async def _settle_running(runner: Passes) -> None:
    for _ in range(200):
        if runner.running == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("passes did not finish")


async def test_the_resync_spreads_every_group_over_its_period() -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    calls: dict[str, list[float]] = {}

    async def run(namespace: str, name: str) -> bool:
        calls.setdefault(name, []).append(loop.time() - started)
        return False

    groups = {GroupRef(NS, name) for name in "abcd"}
    runner = Passes(run, requeue_seconds=60)
    runner.resync(lambda: groups, period_s=2.0)  # one request every 0.5 s
    await asyncio.sleep(0.75)
    # Spread, not a burst: a sleep never ends early, so at most one group has had its pass.
    assert sum(len(times) for times in calls.values()) <= 1
    for _ in range(500):
        if len(calls) == 4:
            break
        await asyncio.sleep(0.01)
    assert sorted(calls) == ["a", "b", "c", "d"]
    firsts = sorted(times[0] for times in calls.values())
    assert all(later - earlier >= 0.45 for earlier, later in itertools.pairwise(firsts))
    # The list is read again each round: a group gone is no longer asked for.
    groups.discard((NS, "a"))
    before = len(calls["a"])
    await asyncio.sleep(2.2)
    assert len(calls["a"]) <= before + 1  # at most the request already under way
    assert len(calls["b"]) >= 2
    await runner.close()
    assert runner._resync is None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pod(name: str, uid: str, **metadata: Any) -> dict[str, Any]:
    labels = {GROUP_LABEL: "g"}
    return {"metadata": {"name": name, "namespace": NS, "uid": uid, "labels": labels, **metadata}}


KUBE = KubeApi.connect(kopf.ConnectionInfo(server="http://never-called"))


def _observed(
    pods: list[dict[str, Any]], groups: dict[Any, list[Any]] | None = None
) -> tuple[Observed, Informer]:
    """An Observed over informers that listed `pods` (and no Secrets) and run no watch: the
    test applies the watch's events itself."""
    observed = Observed(clock=Clock())
    observed.attach(groups or {})
    informers = Informer(lambda: KUBE, MEMBER_PODS), Informer(lambda: KUBE, OPAQUE_SECRETS)
    informers[0].replace(NS, pods)
    for informer in informers:
        informer.synced.set()
    observed.inform(*informers)
    return observed, informers[0]


async def test_a_created_pod_is_listed_until_the_index_shows_it() -> None:
    observed, pods = _observed([])
    observed.pod_created(NS, "g", _pod("g-0", "u0"))
    assert [p["metadata"]["name"] for p in await observed.member_pods(KUBE, NS, "g")] == ["g-0"]
    assert observed.pending(NS, "g")
    pods.apply("ADDED", _pod("g-0", "u0", resourceVersion="5"))
    listed = await observed.member_pods(KUBE, NS, "g")
    assert [p["metadata"].get("resourceVersion") for p in listed] == ["5"]
    assert not observed.pending(NS, "g")


async def test_a_deleted_pod_reads_as_terminating_until_the_index_shows_it() -> None:
    observed, pods = _observed([_pod("g-0", "u0")])
    observed.pod_deleted(NS, "g", ["u0"])
    [pod] = await observed.member_pods(KUBE, NS, "g")
    assert pod["metadata"]["deletionTimestamp"]
    # Its same-name replacement (another uid) is a different pod.
    pods.apply("DELETED", _pod("g-0", "u0"))
    pods.apply("ADDED", _pod("g-0", "u1"))
    [pod] = await observed.member_pods(KUBE, NS, "g")
    assert pod["metadata"]["uid"] == "u1" and not pod["metadata"].get("deletionTimestamp")
    assert not observed.pending(NS, "g")


async def test_an_overlay_entry_expires_when_the_watch_never_shows_it() -> None:
    observed, _ = _observed([])
    observed.pod_created(NS, "g", _pod("g-0", "u0"))
    assert isinstance(observed.clock, Clock)
    observed.clock.now += OVERLAY_SECONDS + 1
    assert await observed.member_pods(KUBE, NS, "g") == []


async def test_a_written_status_is_read_back_until_the_index_catches_up() -> None:
    stale: dict[str, Any] = {
        "metadata": {"name": "g", "namespace": NS, "resourceVersion": "7"},
        "status": {},
    }
    groups: dict[Any, list[Any]] = {(NS, "g"): [stale]}
    observed, _ = _observed([], groups)
    written = {**stale, "metadata": {**stale["metadata"], "resourceVersion": "8"}}
    written["status"] = {"rollout": {"phase": "Rolling", "currentSlot": 1}}
    observed.group_written(written)
    assert (await observed.group(KUBE, NS, "g") or {})["status"] == written["status"]
    groups[(NS, "g")] = [written]
    assert (await observed.group(KUBE, NS, "g") or {})["metadata"]["resourceVersion"] == "8"
    # A later change by someone else is read from the index: the overlay is gone.
    later = {**written, "metadata": {**written["metadata"], "resourceVersion": "9"}, "spec": {}}
    groups[(NS, "g")] = [later]
    assert (await observed.group(KUBE, NS, "g") or {})["metadata"]["resourceVersion"] == "9"


async def test_written_statuses_are_kept_trimmed_and_expire_unread() -> None:
    """What a status write answered is laid over the index without its managedFields, and
    an entry no pass reads again goes once it expired, at the next write of any group (a
    settled fleet's groups are not read again for a minute)."""
    observed, _ = _observed([], {})
    assert isinstance(observed.clock, Clock)

    def written(name: str) -> dict[str, Any]:
        metadata = {"name": name, "namespace": NS, "resourceVersion": "8"}
        return {"metadata": {**metadata, "managedFields": [{"manager": "x"}]}, "status": {}}

    observed.group_written(written("a"))
    observed.clock.now += 10
    observed.group_written(written("b"))
    kept = await observed.group(KUBE, NS, "a") or {}
    assert "managedFields" not in kept["metadata"] and kept["metadata"]["name"] == "a"
    observed.clock.now += OVERLAY_SECONDS - 5  # a expired, b not yet
    observed.group_written(written("c"))
    assert list(observed._written_groups) == [GroupRef(NS, "b"), GroupRef(NS, "c")]
