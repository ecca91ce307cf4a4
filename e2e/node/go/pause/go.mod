// The node's pod sandbox process (scripts/node/build.sh): Kubernetes' pause image comes from a
// registry this machine cannot reach, so we build our own (docs/node.md).
module staticfleet.e2e/node-pause

go 1.26.0
