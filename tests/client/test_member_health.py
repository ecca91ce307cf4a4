"""The member's health decisions (`staticfleet.member.health`), its HTTP edge on loopback, and
the `--health-port` setting."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from coordinator import ManualClock
from coordinator.client import env
from coordinator.client.config import MemberConfig
from coordinator.client.consumer_protocol_member import ConsumerProtocolMember
from coordinator.client.consumer_protocol_state import UNRELEASED_INSTANCE_ID, InstanceIdWait
from coordinator.client.member import GroupMember
from staticfleet.member.health import (
    STALL_MARGIN_MS,
    HealthState,
    Observation,
    Phase,
    liveness,
    readiness,
    stall_limit_ms,
)
from staticfleet.member.health_server import HealthServer
from staticfleet.member.settings import Overrides, settings_from
from tests.client.test_consumer_protocol_state import (
    Recorder,
    ScriptedBroker,
    answer,
    assignment,
    until,
)

SESSION = 10_000
BASE = Observation(
    now_ms=100_000,
    last_tick_ms=100_000,
    stall_limit_ms=stall_limit_ms(SESSION, 100),
    phase=Phase.STABLE,
    session_timeout_ms=SESSION,
    last_contact_ms=99_000,
    was_stable=True,
    generation_id=3,
    partitions=4,
)


def seen(**changes: Any) -> Observation:
    return dataclasses.replace(BASE, **changes)


def test_the_stall_limit_is_the_longest_legitimate_wait_plus_a_margin() -> None:
    assert stall_limit_ms(10_000, 100) == 10_000 + 100 + STALL_MARGIN_MS
    # The consumer protocol's commit waits for the request timeout, longer than the session.
    assert stall_limit_ms(10_000, 100, 30_000) == 30_000 + 100 + STALL_MARGIN_MS
    assert stall_limit_ms(45_000, 100, 30_000) == 45_000 + 100 + STALL_MARGIN_MS


def test_liveness_is_the_loop_tick_within_the_limit() -> None:
    limit = BASE.stall_limit_ms
    assert liveness(seen(last_tick_ms=BASE.now_ms - limit)).ok
    stuck = liveness(seen(last_tick_ms=BASE.now_ms - limit - 1))
    assert (stuck.ok, stuck.reason) == (False, "stuck")
    assert f"{limit + 1} ms" in stuck.detail
    # Cut off from the coordinator, rebalancing or joining: alive all the same.
    for phase in Phase:
        assert liveness(seen(phase=phase, last_contact_ms=0)).ok


@pytest.mark.parametrize(
    ("changes", "ok", "reason"),
    [
        ({}, True, "stable"),
        ({"partitions": 0}, True, "stable"),  # more members than partitions: a spare
        ({"phase": Phase.STARTING, "was_stable": False}, False, "joining"),
        ({"phase": Phase.JOINING, "was_stable": False}, False, "joining"),
        # Never stable yet: a join that outlasts the session is still joining.
        ({"phase": Phase.JOINING, "was_stable": False, "last_contact_ms": 0}, False, "joining"),
        ({"phase": Phase.REBALANCING}, False, "rebalancing"),
        ({"last_contact_ms": BASE.now_ms - SESSION}, True, "stable"),
        ({"last_contact_ms": BASE.now_ms - SESSION - 1}, False, "lost"),
        # Lost partitions and rejoining: still lost until the coordinator answers.
        ({"phase": Phase.REBALANCING, "last_contact_ms": 0}, False, "lost"),
        ({"phase": Phase.STANDBY, "was_stable": False}, True, "standby"),
        ({"phase": Phase.STANDBY, "last_contact_ms": None}, False, "lost"),
        ({"phase": Phase.STANDBY, "last_contact_ms": 0}, False, "lost"),
        ({"phase": Phase.FATAL}, False, "fatal"),
        ({"phase": Phase.CLOSING}, False, "closing"),
    ],
)
def test_readiness(changes: dict[str, Any], ok: bool, reason: str) -> None:
    verdict = readiness(seen(**changes))
    assert (verdict.ok, verdict.reason) == (ok, reason), verdict


def test_the_body_says_what_was_decided_from() -> None:
    observation = seen(last_contact_ms=BASE.now_ms - SESSION - 1)
    body = readiness(observation).body(observation)
    assert body["status"] == "unavailable"
    assert body["reason"] == "lost"
    assert body["last_contact_ms_ago"] == SESSION + 1
    assert (
        body["detail"]
        == f"no answer from the coordinator for {SESSION + 1} ms (session {SESSION} ms)"
    )
    assert (body["phase"], body["generation_id"], body["partitions"]) == ("stable", 3, 4)


def _state(clock: ManualClock) -> HealthState:
    return HealthState(clock, stall_limit_ms=1_000, session_timeout_ms=SESSION)


async def test_state_before_the_member_then_a_created_member() -> None:
    clock = ManualClock(start_ms=50_000)
    state = _state(clock)
    assert readiness(state.observe()).reason == "joining"
    state.member = GroupMember(
        transport=None,  # type: ignore[arg-type]  # never started: no request is sent
        config=MemberConfig(group_id="g", topics=("t",), session_timeout_ms=SESSION),
        clock=clock,
    )
    state.tick()
    assert state.observe().phase is Phase.JOINING
    assert not state.was_stable
    await clock.advance(1_001)
    assert liveness(state.observe()).reason == "stuck"
    state.tick()
    assert liveness(state.observe()).ok


async def test_a_standby_is_ready_while_its_heartbeats_are_answered() -> None:
    clock = ManualClock(start_ms=50_000)
    state = _state(clock)
    state.standby = True
    assert readiness(state.observe()).reason == "lost"  # no answer yet
    state.standby_answered()
    assert readiness(state.observe()).reason == "standby"
    await clock.advance(SESSION + 1)
    assert readiness(state.observe()).reason == "lost"


async def test_a_consumer_protocol_standby_refused_the_held_id_answers_standby() -> None:
    """A waiting standby (--standby-wait-ms) is refused with UNRELEASED_INSTANCE_ID until the
    slot's member leaves: /readyz says `standby` (the refusal is the broker's answer), not
    `joining`, then the phase of a member once it holds the id."""
    clock = ManualClock(start_ms=50_000)
    state = _state(clock)
    journal: list[tuple[str, Any]] = []
    held = [answer(UNRELEASED_INSTANCE_ID)] * 2
    broker = ScriptedBroker([*held, answer(epoch=4, assignment=assignment(0, 1))], journal)
    listener = Recorder(journal)
    member = ConsumerProtocolMember(
        broker,
        MemberConfig("g", ("orders",), group_instance_id="i", session_timeout_ms=SESSION),
        listener,
        clock=clock,
        standby=InstanceIdWait(limit_ms=60_000, retry_ms=150),
    )
    listener.member = member
    state.member = member
    await member.start()
    await until(lambda: len(journal) == 1 and clock.pending_timers() > 0)
    verdict = readiness(state.observe())
    assert (verdict.ok, verdict.reason) == (True, "standby")
    assert state.observe().phase is Phase.STANDBY
    await clock.advance(150)  # the retry: refused again, still a standby
    await until(lambda: len(journal) == 2 and clock.pending_timers() > 0)
    assert readiness(state.observe()).reason == "standby"
    await clock.advance(150)
    await asyncio.wait_for(member.wait_for_assignment(), 5)
    await until(lambda: state.observe().phase is Phase.STABLE)
    assert readiness(state.observe()).reason == "stable"
    await member.close()


def _get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


async def test_the_server_answers_from_the_state() -> None:
    clock = ManualClock(start_ms=50_000)
    state = _state(clock)
    server = HealthServer(state, 0, host="127.0.0.1")
    server.start()
    try:
        assert server.port > 0
        assert _get(server.port, "/livez") == (200, _get(server.port, "/livez")[1])
        status, body = _get(server.port, "/readyz")
        assert (status, body["reason"], body["phase"]) == (503, "joining", "starting")
        await clock.advance(1_001)
        status, body = _get(server.port, "/livez")
        assert (status, body["reason"], body["last_tick_ms_ago"]) == (503, "stuck", 1_001)
    finally:
        server.stop()
    server.stop()  # twice: nothing left to stop


def _settings(environ: dict[str, str], **given: Any) -> int:
    environ = {env.COORDINATOR_URL: "http://c:1", env.GROUP_ID: "g", env.TOPICS: "t", **environ}
    return settings_from(Overrides(**given), environ).health_port


def test_the_health_port_setting() -> None:
    assert _settings({}) == 0
    assert _settings({env.HEALTH_PORT: ""}) == 0
    assert _settings({env.HEALTH_PORT: "8086"}) == 8086
    assert _settings({env.HEALTH_PORT: "8086"}, health_port=9000) == 9000  # a flag wins
    with pytest.raises(ValueError, match="STATICFLEET_HEALTH_PORT must be an integer"):
        _settings({env.HEALTH_PORT: "http"})
    with pytest.raises(ValueError, match="must be 0 \\(off\\) to 65535, not 70000"):
        _settings({}, health_port=70000)
