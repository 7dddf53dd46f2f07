package main

import (
	_ "github.com/cilium/ebpf"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.opentelemetry.io/otel/sdk/trace"
	_ "golang.org/x/arch/x86/x86asm"
	_ "k8s.io/client-go/kubernetes"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {}
