"""A session-scoped SparkSession for the Spark tests (local[2]: the machine has 2 cores)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from pipeline.analytics import small_local_session

# A guard against a hang, not a speed check: on the suite's parallel workers a Spark job can
# take several times its quiet-machine time, and a timeout that fires inside a py4j call
# leaves the shared session answering the wrong calls (every later test fails with it).
SPARK_TIMEOUT_S = 600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in item.nodeid and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SPARK_TIMEOUT_S))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = small_local_session("staticfleet-tests")
    yield session
    session.stop()
