module staticfleet/bench/loadgen

go 1.22
