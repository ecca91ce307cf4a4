"""The Kafka variant's view of the groups: the broker's public API (DescribeGroups,
OffsetFetch) through librdkafka's AdminClient (confluent-kafka), not through the members'
own Kafka layer (`KafkaTransport`), which is code under test. Same methods and shapes as
the admin API's client (`staticfleet.demo.admin.AdminClient`), so the driver samples and
judges convergence the same way on both coordinators.

The AdminClient runs in a child process (`python -m staticfleet.soak.kafka_api BOOTSTRAP`,
one JSON request a line on stdin, one answer a line on stdout), killed and started again
when it does not answer in time. librdkafka 2.16's AdminClient did not survive the broker's
faults in the driver's own process: across a broker SIGSTOP and kill -9 one kept timing
out after the broker was back (every describe, for minutes), destroying it blocked (a
garbage collection hung on it), and one made anew beside it aborted the process
(`rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0 failed`).
"""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
from typing import IO, Any

from staticfleet.demo.admin import AdminError

# ConsumerGroupState's names, as the admin API and Kafka's own tools spell the states.
_STATES = {
    "STABLE": "Stable",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "EMPTY": "Empty",
    "DEAD": "Dead",
}


class BrokerGroupsApi:
    """DescribeGroups and OffsetFetch of a broker; every failure (a broker killed or
    stopped, the child wedged) raises `AdminError` within about `timeout_s`, as the admin
    client does. One per thread (a child answers one request at a time)."""

    def __init__(self, bootstrap: str, timeout_s: float = 2.0) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._child: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    def describe(self, group_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = self._call({"op": "describe", "group_id": group_id})
        return answer

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        answer = self._call({"op": "offsets", "group_id": group_id})
        return {(str(t), int(p)): int(o) for t, p, o in answer}

    def close(self) -> None:
        if self._child is not None:
            self._child.kill()
            self._child.wait()
            self._child = None

    def _call(self, request: dict[str, Any]) -> Any:
        child = self._running_child()
        assert child.stdin is not None and child.stdout is not None
        try:
            child.stdin.write((json.dumps(request) + "\n").encode())
            child.stdin.flush()
            line = _read_line(child.stdout, self.timeout_s + 2.0)
        except OSError as error:
            line, reason = None, str(error)
        else:
            reason = "no answer in time"
        if line is None:
            # Wedged or gone: the next call starts a new one.
            self.close()
            self.restarts += 1
            raise AdminError(f"kafka {request['op']} {request['group_id']}: {reason}")
        answer = json.loads(line)
        if answer.get("error"):
            # A client that failed once may never recover (it timed out for minutes after
            # the broker was back): the next call gets a fresh one.
            self.close()
            self.restarts += 1
            raise AdminError(f"kafka {request['op']} {request['group_id']}: {answer['error']}")
        return answer["result"]

    def _running_child(self) -> subprocess.Popen[bytes]:
        if self._child is None or self._child.poll() is not None:
            self._child = subprocess.Popen(
                [sys.executable, "-m", __name__, self.bootstrap, str(self.timeout_s)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self._child


def _read_line(stream: IO[bytes], timeout_s: float) -> bytes | None:
    """One line, or None if none came in time (or the stream ended)."""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            return None
    line = stream.readline()
    return line or None


def _serve(bootstrap: str, timeout_s: float) -> None:
    """The child: answers describe and offsets requests with librdkafka's AdminClient."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": 2_000}
    )
    for line in sys.stdin:
        request = json.loads(line)
        group_id = request["group_id"]
        answer: dict[str, Any]
        try:
            if request["op"] == "describe":
                futures = admin.describe_consumer_groups([group_id], request_timeout=timeout_s)
                described = futures[group_id].result(timeout_s + 1)
                state = getattr(described.state, "name", str(described.state))
                result: Any = {
                    "group_id": described.group_id,
                    "group_state": _STATES.get(state, state),
                    "members": [
                        {"member_id": m.member_id, "group_instance_id": m.group_instance_id}
                        for m in described.members
                    ],
                }
            else:
                futures = admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group_id)], request_timeout=timeout_s
                )
                fetched = futures[group_id].result(timeout_s + 1)
                result = [
                    [tp.topic, tp.partition, tp.offset]
                    for tp in fetched.topic_partitions or []
                    if tp.error is None and tp.offset >= 0
                ]
            answer = {"result": result}
        except Exception as error:  # KafkaException, a timeout: the broker is not answering
            answer = {"error": str(error) or type(error).__name__}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve(sys.argv[1], float(sys.argv[2]))
