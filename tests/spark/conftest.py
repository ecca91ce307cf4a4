"""A session-scoped SparkSession for the Spark tests (local[2]: the machine has 2 cores)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from pipeline.analytics import small_local_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = small_local_session("staticfleet-tests")
    yield session
    session.stop()
