"""The store failing under the coordinator: logged once with its traceback, then summed."""

from __future__ import annotations

import logging

import pytest

from coordinator.clock import ManualClock
from coordinator.store import StoreError
from coordinator.store_failures import SUMMARY_INTERVAL_MS, StoreFailures


def fail(failures: StoreFailures, message: str = "database or disk is full") -> None:
    try:
        raise StoreError(message)
    except StoreError as error:
        failures.failed(error)


async def test_a_run_of_failures_is_one_traceback_then_a_line_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    failures = StoreFailures(clock, logging.getLogger("test.store"))
    with caplog.at_level(logging.INFO, logger="test.store"):
        for _ in range(50):
            fail(failures)
            await clock.advance(100)  # 50 failures in 5 s: no summary yet
        assert [r.exc_info is not None for r in caplog.records] == [True]
        await clock.advance(SUMMARY_INTERVAL_MS - 5_000)
        fail(failures, "disk I/O error")
        summary = caplog.records[-1]
        assert summary.levelno == logging.ERROR and summary.exc_info is None
        assert "50 more request(s)" in summary.getMessage()
        assert "in the last 10 s (last: disk I/O error)" in summary.getMessage()
        # Within the next interval: counted, not logged.
        fail(failures)
        assert len(caplog.records) == 2

        await clock.advance(2_000)
        failures.succeeded()
        assert not failures.failing
        recovered = caplog.records[-1]
        assert recovered.levelno == logging.WARNING
        assert recovered.getMessage() == (
            "store writes succeed again after 12.0 s and 52 failed request(s)"
        )
        # Quiet while it works; the next failure starts a new run, with its traceback.
        failures.succeeded()
        fail(failures)
        assert len(caplog.records) == 4 and caplog.records[-1].exc_info is not None
