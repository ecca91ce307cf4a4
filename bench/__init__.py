"""Benchmarks (docs/performance.md). Run them with `make bench` or `python -m bench.run`."""
