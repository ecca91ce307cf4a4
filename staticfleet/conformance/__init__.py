"""Conformance: the same group-protocol sequences sent to our coordinator and to a real
Kafka broker, answers compared step by step (see `runner`)."""
