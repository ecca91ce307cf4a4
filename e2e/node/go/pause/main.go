// Command pause is a pod sandbox's process: it holds the pod's namespaces, reaps the
// zombies it inherits as PID 1 and exits on SIGINT or SIGTERM, as Kubernetes' pause.c does
// (which we cannot pull: no registry; a C toolchain is not needed for this one job).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
