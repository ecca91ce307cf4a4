"""Kafka's own assignors (kafka-clients) in one JVM, for the differential test.

The harness (java/assignors, built by `make java-assignors` into build/java/assignors) reads
one group per JSON line and answers with each Kafka assignor's assignment; the JVM stays up
for the whole test run. See java/assignors/src/main/java/dev/staticfleet/assignors/Harness.java
for the format and for how each member's subscription is built.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from coordinator.protocol import TopicPartition

REPO = Path(__file__).resolve().parents[2]
HARNESS_JAR = REPO / "build" / "java" / "assignors" / "assignor-harness.jar"


@dataclass(frozen=True)
class Member:
    member_id: str
    instance_id: str | None
    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...]
    generation: int


@dataclass(frozen=True)
class Group:
    partitions_per_topic: dict[str, int]
    members: tuple[Member, ...]

    def to_json(self, assignors: Sequence[str], repeat: int | None = None) -> str:
        return json.dumps(
            {
                "assignors": list(assignors),
                "repeat": repeat,
                "topics": self.partitions_per_topic,
                "members": [
                    {
                        "id": m.member_id,
                        "instance": m.instance_id,
                        "topics": list(m.topics),
                        "owned": [[tp.topic, tp.partition] for tp in m.owned],
                        "generation": m.generation,
                    }
                    for m in self.members
                ],
            }
        )


# Per assignor: member id -> its partitions in Kafka's order, or the message of what Kafka threw.
KafkaAnswer = dict[str, dict[str, tuple[TopicPartition, ...]] | str]


def build_harness() -> Path:
    """Build the jar with the project's own Makefile target (a no-op when up to date)."""
    subprocess.run(["make", "--no-print-directory", "java-assignors"], cwd=REPO, check=True)
    return HARNESS_JAR


class KafkaAssignors:
    """One long-running harness JVM: `assign` sends a group and reads Kafka's answer."""

    def __init__(self, jar: Path) -> None:
        self._process = subprocess.Popen(
            ["java", "-jar", str(jar)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def assign(self, group: Group, assignors: Sequence[str]) -> KafkaAnswer:
        return self._ask(group, assignors, None)[0]

    def timed_assign(
        self, group: Group, assignor: str, repeat: int
    ) -> tuple[KafkaAnswer, list[int]]:
        """Kafka's answer and the nanoseconds of each of `repeat` `assign` calls (measured in
        the JVM, around `assign` only)."""
        answer, nanos = self._ask(group, [assignor], repeat)
        return answer, nanos[assignor]

    def _ask(
        self, group: Group, assignors: Sequence[str], repeat: int | None
    ) -> tuple[KafkaAnswer, dict[str, list[int]]]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(group.to_json(assignors, repeat) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"assignor harness exited with {self._process.wait()}")
        document = json.loads(line)
        nanos: dict[str, list[int]] = document.pop("nanos", {})
        answer: KafkaAnswer = {}
        for name, result in document.items():
            if "error" in result and not isinstance(result["error"], list):
                answer[name] = str(result["error"])
            else:
                answer[name] = {
                    member_id: tuple(TopicPartition(t, p) for t, p in partitions)
                    for member_id, partitions in result.items()
                }
        return answer, nanos

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)
