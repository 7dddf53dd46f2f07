package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/reconscope/reconscope/pkg/exporter"
)

// waitBelowFloor is run's answer on a node whose kernel lacks what reconscope needs: one error
// line, then the pod stays up and not Ready (/healthz 200, so the kubelet does not restart it
// in a loop; /readyz 503 with the reason) until SIGTERM. /metrics still answers, with
// reconscope_tracing{reason="kernel_below_floor"} 0 and the build and process metrics, so that
// the node shows as not tracing rather than vanishing from Prometheus. metrics is nil when
// --metrics-addr is empty. It returns run's exit code.
func waitBelowFloor(ctx context.Context, reason error, addr string, sec *metricsSecurity, metrics *exporter.Metrics, log *slog.Logger) int {
	log.Error("not tracing on this node", "reason", reason.Error())
	if addr == "" || metrics == nil {
		<-ctx.Done()
		return 0
	}
	metrics.SetTracing(exporter.NotTracingBelowFloor)
	ln, err := listenMetrics(addr, sec)
	if err != nil {
		log.Error("serve health", "addr", addr, "err", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle("/", metrics.Handler()) // /metrics and /healthz
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not tracing: " + reason.Error() + "\n"))
	})
	srv := &http.Server{Handler: sec.handler(mux), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve health", "err", err)
		}
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return 0
}
