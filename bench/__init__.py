"""Benchmarks (DESIGN §5). Run them with `make bench` or `python -m bench.run`."""
