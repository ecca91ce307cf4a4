module staticfleet/bench/loadgen

go 1.24.0

require github.com/twmb/franz-go/pkg/kmsg v1.12.0
