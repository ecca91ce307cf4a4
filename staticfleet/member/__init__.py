"""The fleet member runtime: one process that joins a group and consumes its partitions.

`staticfleet member run` (`staticfleet.commands.member_cmd`) and the Spark executors
(`pipeline.executor_members`) both run it. One job per module:

* `settings`        — `Settings`, resolved from given values and the `STATICFLEET_*`
  environment (`settings_from`);
* `events`          — the JSON-lines ownership event log (`EventLog`, `read_events`);
* `source_consumer` — the rebalance listener that reads the owned partitions and commits;
* `cluster_metadata` — topic metadata from the Kafka cluster the member reads;
* `runtime`         — `run_member` and its exit codes.
"""
