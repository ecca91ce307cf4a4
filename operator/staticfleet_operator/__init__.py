"""The staticfleet Kubernetes operator (Kopf). Lives in `operator/` but is named
`staticfleet_operator` so it never shadows Python's own `operator` module."""
