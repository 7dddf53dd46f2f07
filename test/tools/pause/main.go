// Command pause is the test bed's pod sandbox ("pause") container: the process that holds a
// pod's namespaces while its containers come and go, like registry.k8s.io/pause. It sleeps until
// SIGTERM or SIGINT and exits 0; as PID 1 of a pod that shares its PID namespace it reaps the
// children handed to it. Static, no dependencies: test/testenv builds it and imports it into the
// node's containerd as the sandbox image, so the node never pulls an image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for { // reap every child that has exited; several SIGCHLDs may have merged into one
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
