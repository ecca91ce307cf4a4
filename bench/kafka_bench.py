"""Apache Kafka in the loop: the broker's cost, and a member's throughput on real topics.

* install: `mvn package` of java/broker/pom.xml into an empty Maven repository (cold: every jar
  and plugin downloaded from Maven Central) and into a warm one (the jars cached in ~/.m2,
  only copied), as scripts/install-kafka.sh runs it;
* broker: time from `KafkaBroker.start()` (storage format included) to the first metadata
  answer, over fresh log directories; the same after a SIGKILL on the same directory; the
  broker JVM's resident set when ready and its peak after the throughput run; as a user's
  broker starts, without the tests' class-data sharing (staticfleet/kafka/class_sharing.py);
* member: one `staticfleet member run --source kafka://` process pinned to one core,
  grouped by a `staticfleet coordinator serve` process, reading records produced before it
  starts; records/s from its assignment to the commit that reaches every end offset, and
  per CPU second of the member process;
* rolling restart: three static members read a topic a producer writes at a steady rate;
  each is restarted in turn (SIGTERM, a new process with the same instance id). Rebalances
  and partition moves come from the members' event logs; end-to-end lag is, per record,
  the time from its produce timestamp to the first commit past it, before and during the
  restarts.

Not part of `make test`; `make bench` runs it (bench/results/kafka.json).
"""

from __future__ import annotations

import bisect
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from bench.child import process_cpu_seconds
from staticfleet.kafka.broker import HEAP, REPO_ROOT, KafkaBroker, ensure_installed

POM = REPO_ROOT / "java" / "broker" / "pom.xml"
PARTITIONS = 4
VALUE = b"x" * 100


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return 0


def install(workdir: Path, repository: Path | None) -> dict[str, Any]:
    libs = workdir / "libs"
    command = ["mvn", "-q", "-B", "-f", str(POM), "package", f"-Dlibs.dir={libs}"]
    if repository is not None:
        command.append(f"-Dmaven.repo.local={repository}")
    clock = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - clock
    jars = list(libs.glob("*.jar"))
    return {
        "seconds": round(seconds, 2),
        "jars": len(jars),
        "mib": round(sum(jar.stat().st_size for jar in jars) / 2**20, 1),
    }


def broker_start(workdir: Path, runs: int) -> dict[str, Any]:
    ready: list[float] = []
    formats: list[float] = []
    rss: list[int] = []
    for run in range(runs):
        broker = KafkaBroker(workdir / f"broker-{run}", class_sharing=False)
        clock = time.perf_counter()
        broker.start()
        formats.append(time.perf_counter() - clock)
        broker.wait_ready(180)
        ready.append(time.perf_counter() - clock)
        time.sleep(1.0)
        assert broker.pid is not None
        rss.append(_status_kib(broker.pid, "VmRSS"))
        if run == runs - 1:
            broker.create_topic("restart", 2)
            broker.kill()
            clock = time.perf_counter()
            broker.start()
            broker.wait_ready(180)
            after_kill = time.perf_counter() - clock
        broker.stop()
    return {
        "runs": runs,
        "ready_seconds": [round(value, 2) for value in ready],
        "ready_seconds_median": round(sorted(ready)[len(ready) // 2], 2),
        "format_seconds": [round(value, 2) for value in formats],
        "ready_after_sigkill_seconds": round(after_kill, 2),
        "rss_when_ready_mib": [round(value / 1024, 1) for value in rss],
        "jvm_flags": [HEAP, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"],
    }


def _produce(bootstrap: str, topic: str, records: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    clock = time.perf_counter()
    for n in range(records):
        while True:
            try:
                producer.produce(topic, value=VALUE, partition=n % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return time.perf_counter() - clock


def _end_offsets(bootstrap: str, topic: str) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        return {
            (topic, p): consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), 10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def _events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def member_throughput(workdir: Path, records: int) -> dict[str, Any]:
    broker = KafkaBroker(workdir / "broker-throughput", class_sharing=False)
    broker.start()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        broker.wait_ready(180)
        topic = "throughput"
        broker.create_topic(topic, PARTITIONS)
        produce_seconds = _produce(broker.bootstrap, topic, records)
        ends = _end_offsets(broker.bootstrap, topic)
        assert sum(ends.values()) == records

        ready = workdir / "coordinator.ready"
        staticfleet = [sys.executable, "-m", "staticfleet.cli"]
        coordinator = subprocess.Popen(
            [
                *staticfleet,
                *("coordinator", "serve", "--store", "memory://", "--port", "0", "--insecure"),
                *("--initial-rebalance-delay-ms", "0", "--ready-file", str(ready)),
                *("--log-level", "WARNING"),
            ]
        )
        processes.append(coordinator)
        while not ready.exists():
            assert coordinator.poll() is None
            time.sleep(0.05)
        events = workdir / "member.jsonl"
        cpus = sorted(os.sched_getaffinity(0))
        last_cpu = {cpus[-1]}
        member = subprocess.Popen(
            [
                *staticfleet,
                *("member", "run", "--commit-interval-ms", "100"),
                *("--source", f"kafka://{broker.bootstrap}"),
            ],
            env={
                **os.environ,
                "STATICFLEET_COORDINATOR_URL": f"http://127.0.0.1:{ready.read_text().strip()}",
                "STATICFLEET_GROUP_ID": "bench",
                "STATICFLEET_INSTANCE_ID": "bench-0",
                "STATICFLEET_TOPICS": topic,
                "STATICFLEET_EVENT_LOG": str(events),
            },
            preexec_fn=lambda: os.sched_setaffinity(0, last_cpu),
        )
        processes.append(member)
        target = {f"{t}/{p}": offset for (t, p), offset in ends.items()}
        assigned_ms = done_ms = None
        deadline = time.monotonic() + 600
        while done_ms is None:
            assert member.poll() is None, "member exited"
            assert time.monotonic() < deadline, "member did not catch up"
            committed: dict[str, int] = {}
            for row in _events(events):
                if row["event"] == "assigned" and row["partitions"] and assigned_ms is None:
                    assigned_ms = row["ts_ms"]
                if row["event"] == "commit":
                    for t, p, offset in row["offsets"]:
                        committed[f"{t}/{p}"] = offset
                    if committed == target:
                        done_ms = row["ts_ms"]
                        break
            time.sleep(0.2)
        assert assigned_ms is not None
        member_cpu = process_cpu_seconds(member.pid)
        member_rss = _status_kib(member.pid, "VmHWM")
        assert broker.pid is not None
        broker_rss = _status_kib(broker.pid, "VmHWM")
        seconds = (done_ms - assigned_ms) / 1000
        cpu_during = member_cpu  # includes start-up (imports, joining): a lower bound
        member.send_signal(signal.SIGTERM)
        member.wait(30)
        if os.environ.get("BENCH_KEEP_EVENTS"):
            shutil.copy(events, os.environ["BENCH_KEEP_EVENTS"])
        return {
            "records": records,
            "partitions": PARTITIONS,
            "value_bytes": len(VALUE),
            "produce_seconds": round(produce_seconds, 2),
            "produce_records_per_second": round(records / produce_seconds),
            "member_seconds_assigned_to_all_committed": round(seconds, 2),
            "member_records_per_second": round(records / seconds),
            "member_cpu_seconds": round(member_cpu, 2),
            "member_records_per_cpu_second": round(records / cpu_during),
            "member_pinned_cpus": sorted(last_cpu),
            "member_peak_rss_mib": round(member_rss / 1024, 1),
            "broker_peak_rss_mib": round(broker_rss / 1024, 1),
            "commit_interval_ms": 100,
        }
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
        broker.stop()


def _owners(rows: list[dict[str, Any]]) -> dict[int, str]:
    """Partition -> the instance holding it after these rows (assigned adds, revoked,
    lost and stopped end a holding)."""
    held: dict[str, set[int]] = {}
    for row in sorted(rows, key=lambda row: row["ts_ms"]):
        owned = held.setdefault(row["instance_id"], set())
        if row["event"] == "assigned":
            owned.update(p for _, p in row["partitions"])
        elif row["event"] in ("revoked", "lost"):
            owned.difference_update(p for _, p in row["partitions"])
        elif row["event"] in ("stopped", "fatal"):
            owned.clear()
    return {p: instance for instance, owned in held.items() for p in owned}


def _evenly_held(rows: list[dict[str, Any]], instances: tuple[str, ...], partitions: int) -> bool:
    owners = _owners(rows)
    counts = [list(owners.values()).count(instance) for instance in instances]
    return len(owners) == partitions and max(counts) - min(counts) <= 1 and min(counts) > 0


def _start_coordinator(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    ready = workdir / "coordinator.ready"
    process = subprocess.Popen(
        [
            sys.executable,
            *("-m", "staticfleet.cli", "coordinator", "serve", "--store", "memory://"),
            *("--port", "0", "--insecure", "--initial-rebalance-delay-ms", "500"),
            *("--min-session-timeout-ms", "1000", "--ready-file", str(ready)),
            *("--log-level", "ERROR"),
        ]
    )
    while not ready.exists():
        assert process.poll() is None, "coordinator exited"
        time.sleep(0.05)
    return process, f"http://127.0.0.1:{ready.read_text().strip()}"


class SteadyProducer(threading.Thread):
    """Produces `rate` records/s round-robin over the partitions; remembers each record's
    produce timestamp by (partition, offset) from the delivery reports."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        super().__init__(daemon=True)
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 0})
        self.produced_ms: dict[tuple[int, int], int] = {}
        self.stopping = threading.Event()

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.produced_ms[(message.partition(), message.offset())] = message.timestamp()[1]

    def run(self) -> None:
        tick = 0.01
        per_tick = max(1, int(self.rate * tick))
        n = 0
        next_tick = time.monotonic()
        while not self.stopping.is_set():
            for _ in range(per_tick):
                partition = n % self.partitions
                self.producer.produce(
                    self.topic, value=VALUE, partition=partition, on_delivery=self._delivered
                )
                n += 1
            self.producer.poll(0)
            next_tick += tick
            time.sleep(max(0.0, next_tick - time.monotonic()))
        self.producer.flush(30)


def _latencies_ms(
    produced_ms: dict[tuple[int, int], int],
    rows: list[dict[str, Any]],
    topic: str,
    window: tuple[int, int],
) -> list[int]:
    """For each record produced in `window`: first commit past it minus its produce time."""
    commits: dict[int, list[tuple[int, int]]] = {}
    for row in rows:
        if row["event"] == "commit":
            for t, p, offset in row["offsets"]:
                if t == topic:
                    commits.setdefault(p, []).append((offset, row["ts_ms"]))
    # Per partition: ts of the first commit whose offset exceeds o (offsets only grow).
    frontier: dict[int, tuple[list[int], list[int]]] = {}
    for p, items in commits.items():
        items.sort(key=lambda item: item[1])
        offsets, stamps, best = [], [], -1
        for offset, ts in items:
            if offset > best:
                best = offset
                offsets.append(offset)
                stamps.append(ts)
        frontier[p] = (offsets, stamps)
    latencies = []
    for (p, offset), produced in produced_ms.items():
        if not window[0] <= produced < window[1] or p not in frontier:
            continue
        offsets, stamps = frontier[p]
        index = bisect.bisect_right(offsets, offset)
        if index < len(offsets):
            latencies.append(stamps[index] - produced)
    return sorted(latencies)


def _summary(latencies: list[int]) -> dict[str, Any]:
    if not latencies:
        return {"records": 0}
    return {
        "records": len(latencies),
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[int(len(latencies) * 0.99)],
        "max_ms": latencies[-1],
    }


def kafka_group_available() -> bool:
    """Whether this checkout's members can keep their group on a Kafka cluster
    (`STATICFLEET_COORDINATOR_URL=kafka://…`, the Kafka transport of issue 11 part B)."""
    return importlib.util.find_spec("coordinator.client.kafka_transport") is not None


def rolling_restart(
    workdir: Path, rate: int, settle_s: float, group_on: str = "embedded"
) -> dict[str, Any]:
    """`group_on`: "embedded" (a `coordinator serve` process) or "kafka" (the broker's own
    group coordinator); the records come from the broker either way."""
    workdir = workdir / f"rolling-{group_on}"
    workdir.mkdir(parents=True)
    broker = KafkaBroker(workdir / "broker", class_sharing=False)
    broker.start()
    processes: dict[str, subprocess.Popen[bytes]] = {}
    coordinator: subprocess.Popen[bytes] | None = None
    producer: SteadyProducer | None = None
    logs: list[Path] = []
    instances = ("member-0", "member-1", "member-2")
    partitions = 6
    try:
        broker.wait_ready(180)
        topic = "rolling"
        broker.create_topic(topic, partitions)
        if group_on == "kafka":
            url = f"kafka://{broker.bootstrap}"
        else:
            coordinator, url = _start_coordinator(workdir)

        def start(instance: str, incarnation: int) -> None:
            log = workdir / f"{instance}-{incarnation}.jsonl"
            logs.append(log)
            processes[instance] = subprocess.Popen(
                [
                    sys.executable,
                    *("-m", "staticfleet.cli", "member", "run", "--commit-interval-ms", "100"),
                    *("--source", f"kafka://{broker.bootstrap}"),
                ],
                env={
                    **os.environ,
                    "STATICFLEET_COORDINATOR_URL": url,
                    "STATICFLEET_GROUP_ID": "rolling",
                    "STATICFLEET_INSTANCE_ID": instance,
                    "STATICFLEET_TOPICS": topic,
                    "STATICFLEET_REBALANCE_PROTOCOL": "cooperative",
                    "STATICFLEET_SESSION_TIMEOUT_MS": "10000",
                    "STATICFLEET_HEARTBEAT_INTERVAL_MS": "500",
                    "STATICFLEET_EVENT_LOG": str(log),
                },
            )

        def rows() -> list[dict[str, Any]]:
            return [row for log in logs for row in _events(log)]

        def assigned_count(log: Path) -> int:
            return sum(1 for row in _events(log) if row["event"] == "assigned")

        producer = SteadyProducer(broker.bootstrap, topic, partitions, rate)
        producer.start()
        for instance in instances:
            start(instance, 0)
        deadline = time.monotonic() + 120
        while not _evenly_held(rows(), instances, partitions):
            assert time.monotonic() < deadline, "members did not share the partitions"
            time.sleep(0.2)
        time.sleep(settle_s)
        steady_start_ms = int(time.time() * 1000)
        time.sleep(settle_s)
        restart_start_ms = int(time.time() * 1000)
        before = rows()
        generation_before = max(r["generation_id"] for r in before if r["event"] == "assigned")
        owner_before = _owners(before)
        for instance in instances:
            processes[instance].send_signal(signal.SIGTERM)
            processes[instance].wait(30)
            start(instance, 1)
            new_log = logs[-1]
            deadline = time.monotonic() + 60
            while assigned_count(new_log) == 0:
                assert time.monotonic() < deadline, f"{instance} did not rejoin"
                time.sleep(0.05)
            time.sleep(1.0)
        restart_end_ms = int(time.time() * 1000)
        time.sleep(settle_s)
        producer.stopping.set()
        producer.join(60)
        time.sleep(2.0)
        all_rows = rows()

        def lag(window: tuple[int, int]) -> list[int]:
            assert producer is not None
            return _latencies_ms(producer.produced_ms, all_rows, topic, window)

        after = [row for row in all_rows if row["ts_ms"] >= restart_start_ms]
        generations_after = {row["generation_id"] for row in after if row["event"] == "assigned"}
        moved = {
            p
            for row in after
            if row["event"] == "assigned"
            for _, p in row["partitions"]
            if owner_before.get(p) != row["instance_id"]
        }
        return {
            "group_on": group_on,
            "members": len(instances),
            "partitions": partitions,
            "produce_rate_records_per_second": rate,
            "rebalances_during_restart": len(generations_after - {generation_before}),
            "generation_before": generation_before,
            "generation_after": sorted(generations_after),
            "partitions_that_changed_owner": len(moved),
            # A stopping static member revokes what it holds on close and its successor is
            # given the same partitions back; "lost" would mean a member was dropped.
            "lost_during_restart": sum(1 for row in after if row["event"] == "lost"),
            "restart_window_seconds": round((restart_end_ms - restart_start_ms) / 1000, 2),
            "lag_steady": _summary(lag((steady_start_ms, restart_start_ms))),
            "lag_during_restart": _summary(lag((restart_start_ms, restart_end_ms))),
        }
    finally:
        if producer is not None:
            producer.stopping.set()
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
        if coordinator is not None:
            coordinator.send_signal(signal.SIGTERM)
            coordinator.wait(30)
        broker.stop()


def run(quick: bool) -> dict[str, Any]:
    ensure_installed()
    workdir = Path(tempfile.mkdtemp(prefix="staticfleet-kafka-bench-"))
    rate, settle_s = (600, 2.0) if quick else (3000, 5.0)
    try:
        load_before = os.getloadavg()
        results: dict[str, Any] = {
            "kafka_version": "4.4.0",
            "install_cold": install(workdir / "cold", workdir / "m2"),
            "install_warm": install(workdir / "warm", None),
            "broker": broker_start(workdir, 1 if quick else 3),
            "member": member_throughput(workdir, 100_000 if quick else 2_000_000),
            "rolling_restart": rolling_restart(workdir, rate, settle_s),
        }
        if kafka_group_available():
            results["rolling_restart_group_on_kafka"] = rolling_restart(
                workdir, rate, settle_s, group_on="kafka"
            )
        results["load_average_1m_before_after"] = [
            round(load_before[0], 2),
            round(os.getloadavg()[0], 2),
        ]
        return results
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
