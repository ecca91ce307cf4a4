"""End-to-end test harness: a real Kubernetes control plane on loopback."""
