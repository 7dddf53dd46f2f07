//go:build otel

package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/reconscope/reconscope/test/fakectl/controller"
)

// discard is a span exporter that drops what it is given: the batch span processor does all
// its work in the process, nothing leaves it.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// The twin build's hand-made instrumentation, as a controller would add it: one SDK span per
// reconcile with the object's attributes, and a reconcile-time histogram like
// controller-runtime's controller_runtime_reconcile_time_seconds.
func init() {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	tracer := tp.Tracer("reconcileloop")
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "reconcile_time_seconds",
		Help:    "Length of time per reconciliation per controller.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"controller"})
	prometheus.NewRegistry().MustRegister(hist)
	instrument = func(ctx context.Context, c *controller.Controller[controller.Request], req controller.Request) (context.Context, func(controller.Result, error)) {
		start := time.Now()
		ctx, span := tracer.Start(ctx, "reconcile "+c.Name, trace.WithAttributes(
			attribute.String("k8s.namespace.name", req.Namespace),
			attribute.String("k8s.object.name", req.Name),
		))
		return ctx, func(_ controller.Result, err error) {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
			hist.WithLabelValues(c.Name).Observe(time.Since(start).Seconds())
		}
	}
}
