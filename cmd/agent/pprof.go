package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/spf13/pflag"
)

// addPprofFlag adds --pprof-addr (trace and run): the agent's own Go profiles, off by default.
func addPprofFlag(fs *pflag.FlagSet) *string {
	return fs.String("pprof-addr", "", `serve the agent's own Go profiles (net/http/pprof, /debug/pprof/: CPU, heap, goroutines) on this address, e.g. 127.0.0.1:6060; unauthenticated, keep it on a loopback address ("" disables, the default)`)
}

// servePprof serves net/http/pprof's handlers on addr, on a mux of their own (not the metrics
// server's, which may be reachable from the cluster), until the returned server is closed. An
// empty addr serves nothing.
func servePprof(addr string, log *slog.Logger) (*http.Server, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("pprof server", "err", err)
		}
	}()
	log.Info("serving pprof", "addr", ln.Addr().String())
	return srv, nil
}
