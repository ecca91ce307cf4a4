"""Apache Kafka in the loop: a local broker for tests and the demo, and a Kafka source."""
