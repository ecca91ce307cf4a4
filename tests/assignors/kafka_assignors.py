"""Kafka's own assignors (kafka-clients) in one JVM, for the differential test.

The harness (java/assignors, built by `make java-assignors` into build/java/assignors) reads
one group per JSON line and answers with each Kafka assignor's assignment; the JVM stays up
for the whole test run. See java/assignors/src/main/java/dev/staticfleet/assignors/Harness.java
for the format and for how each member's subscription is built.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

    def to_json(
        self,
        assignors: Sequence[str],
        repeat: int | None = None,
        *,
        serialize: bool = False,
        sizes_only: bool = False,
    ) -> str:
        return json.dumps(
            {
                "assignors": list(assignors),
                "repeat": repeat,
                "serialize": serialize,
                "answer": "sizes" if sizes_only else "partitions",
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


@dataclass(frozen=True)
class SerializedRun:
    """Kafka's timings of one assignor on one group, with the leader's serialization."""

    # member id -> number of partitions assigned
    sizes: dict[str, int]
    # nanoseconds of each `assign` call
    assign_nanos: list[int]
    # nanoseconds of each `assign` call plus ConsumerProtocol.serializeAssignment of every
    # member's assignment (separate calls from `assign_nanos`)
    serialize_nanos: list[int]
    # SHA-256 over (member id, int32 length, bytes) of the serialized assignments, members
    # in id order; `serialized_digest` computes the same over ours
    sha256: str
    # SHA-256 over (member id, then topic, a zero byte, int32 partition of each partition in
    # (topic, partition) order): equal when the assignments are, in whatever order they are
    # listed (Kafka's range lists topics in hash order); `sorted_digest` over ours
    sorted_sha256: str


def serialized_digest(encoded: dict[str, bytes]) -> str:
    """The harness's digest of serialized assignments (see `SerializedRun.sha256`)."""
    digest = hashlib.sha256()
    for member_id in sorted(encoded, key=_java_order):
        data = encoded[member_id]
        digest.update(member_id.encode())
        digest.update(len(data).to_bytes(4, "big"))
        digest.update(data)
    return digest.hexdigest()


def sorted_digest(assignment: Mapping[str, Sequence[TopicPartition]]) -> str:
    """The harness's digest of assignments in (topic, partition) order (`sorted_sha256`)."""
    digest = hashlib.sha256()
    for member_id in sorted(assignment, key=_java_order):
        digest.update(member_id.encode())
        for topic, partition in sorted(
            assignment[member_id], key=lambda tp: (_java_order(tp[0]), tp[1])
        ):
            digest.update(topic.encode() + b"\0" + partition.to_bytes(4, "big", signed=True))
    return digest.hexdigest()


def _java_order(text: str) -> bytes:
    return text.encode("utf-16-be", "surrogatepass")


class KafkaAssignors:
    """One long-running harness JVM: `assign` sends a group and reads Kafka's answer.

    With `cpu`, the JVM (all its threads: JIT compilers and GC included) is pinned to that
    core with `taskset -c`, for the benchmark's one-core side-by-side.
    """

    def __init__(self, jar: Path, cpu: int | None = None) -> None:
        # taskset (util-linux) is on every Linux the project runs on; elsewhere, unpinned.
        pin = ["taskset", "-c", str(cpu)] if cpu is not None and shutil.which("taskset") else []
        self._process = subprocess.Popen(
            [*pin, "java", "-jar", str(jar)],
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

    def timed_serialized(self, group: Group, assignor: str, repeat: int) -> SerializedRun:
        """`repeat` timed `assign` calls, then `repeat` timed calls of `assign` plus the
        serialization of every member's assignment; the sizes and digest of the result."""
        document = self._send(group.to_json([assignor], repeat, serialize=True, sizes_only=True))
        result = document[assignor]
        if "error" in result and not isinstance(result["error"], int):
            raise RuntimeError(f"Kafka's {assignor} failed: {result['error']}")
        return SerializedRun(
            sizes={m: int(n) for m, n in result.items()},
            assign_nanos=document["nanos"][assignor],
            serialize_nanos=document["serialize_nanos"][assignor],
            sha256=document["sha256"][assignor],
            sorted_sha256=document["sorted_sha256"][assignor],
        )

    def _send(self, line: str) -> dict[str, Any]:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(line + "\n")
        stdin.flush()
        answer = stdout.readline()
        if not answer:
            raise RuntimeError(f"assignor harness exited with {self._process.wait()}")
        document: dict[str, Any] = json.loads(answer)
        return document

    def _ask(
        self, group: Group, assignors: Sequence[str], repeat: int | None
    ) -> tuple[KafkaAnswer, dict[str, list[int]]]:
        document = self._send(group.to_json(assignors, repeat))
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
