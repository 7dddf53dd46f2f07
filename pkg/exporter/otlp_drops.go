package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// spanAccounting gates the BatchSpanProcessor so that it never drops a span on its own
// (it would, silently, when its queue is full) and counts every span's fate. A span is reserved
// before it is made and settled when its export returns: so the number in flight bounds the
// processor's queue plus the batch being exported.
type spanAccounting struct {
	mu                sync.Mutex
	max               int
	inflight, peak    int
	exported, dropped uint64
}

func (a *spanAccounting) reserve(n int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inflight+n > a.max {
		a.dropped += uint64(n)
		return false
	}
	a.inflight += n
	a.peak = max(a.peak, a.inflight)
	return true
}

// settle records the outcome of an export of ok+failed spans.
func (a *spanAccounting) settle(ok, failed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// After abandon, a late export may still return: count only what is still in flight.
	ok = min(ok, a.inflight)
	failed = min(failed, a.inflight-ok)
	a.inflight -= ok + failed
	a.exported += uint64(ok)
	a.dropped += uint64(failed)
}

func (a *spanAccounting) drop(n int) {
	a.mu.Lock()
	a.dropped += uint64(n)
	a.mu.Unlock()
}

// abandon counts what is still in flight as dropped (after Shutdown).
func (a *spanAccounting) abandon() {
	a.mu.Lock()
	a.dropped += uint64(a.inflight)
	a.inflight = 0
	a.mu.Unlock()
}

func (a *spanAccounting) stats() OTLPStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return OTLPStats{Exported: a.exported, Dropped: a.dropped, Queued: a.inflight}
}

// countingExporter settles the accounting with the outcome of each export and logs when
// exporting starts failing and when it recovers.
type countingExporter struct {
	next    sdktrace.SpanExporter
	acct    *spanAccounting
	logger  *slog.Logger
	mu      sync.Mutex
	failing bool
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.next.ExportSpans(ctx, spans)
	n := len(spans)
	failed := 0
	if err != nil {
		if rejected, ok := partialSuccessRejected(err); ok {
			failed = int(min(int64(n), max(rejected, 0)))
		} else {
			failed = n
		}
	}
	c.acct.settle(n-failed, failed)

	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil && failed == n && !c.failing:
		c.failing = true
		c.logger.Warn("OTLP export failing; spans are dropped until the collector is reachable", "spans", n, "err", err)
	case err != nil && failed < n:
		c.logger.Warn("OTLP collector rejected some spans", "rejected", failed, "spans", n, "err", err)
	case err == nil && c.failing:
		c.failing = false
		c.logger.Info("OTLP export recovered")
	}
	return err
}

func (c *countingExporter) Shutdown(ctx context.Context) error { return c.next.Shutdown(ctx) }

// partialSuccessRejected finds an OTLP partial success in err (the collector accepted the
// request but rejected some spans) and returns how many spans were rejected; ok is false when
// err holds anything else (the whole export failed).
//
// The OpenTelemetry Go SDK returns a partial success from ExportSpans as an error whose type
// lives in an internal package, on purpose (open-telemetry/opentelemetry-go#3146): there is no
// exported type to match with errors.As, and the global error handler is given the same error.
// What the SDK does export is the error's text, the same for gRPC and HTTP:
// "OTLP partial success: MESSAGE (N spans rejected)". TestOTLPPartialSuccess pins it for both
// transports against a collector that answers with a partial success.
func partialSuccessRejected(err error) (int64, bool) {
	switch u := err.(type) {
	case nil:
		return 0, false
	case interface{ Unwrap() []error }: // errors.Join: the retry loop's errors and this one
		var total int64
		found := false
		for _, e := range u.Unwrap() {
			n, ok := partialSuccessRejected(e)
			if !ok {
				return 0, false // another error: the whole export failed
			}
			total += n
			found = true
		}
		return total, found
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, partialSuccessPrefix) {
		if w := errors.Unwrap(err); w != nil {
			return partialSuccessRejected(w) // "traces export: ..." around it
		}
		return 0, false
	}
	i := strings.LastIndex(msg, " (")
	var n int64
	if i < 0 || !strings.HasSuffix(msg, " spans rejected)") {
		return 0, false
	}
	if _, err := fmt.Sscanf(msg[i:], " (%d spans rejected)", &n); err != nil {
		return 0, false
	}
	return n, true
}

// partialSuccessPrefix begins the SDK's partial-success error text.
const partialSuccessPrefix = "OTLP partial success: "
