package probes

import (
	"time"

	"github.com/reconscope/reconscope/pkg/span"
)

// Raw is one probe event as the kernel wrote it, with its strings already copied out.
type Raw struct {
	Entry       bool
	PID         uint32
	Time        uint64
	G           uint64
	Goid        int64
	SpanStart   uint64
	Nested      bool
	NoEntry     bool
	Args        [9]uint64
	Str         [4]string
	Truncated   [4]bool
	ReconcileID string
	ErrorMsg    string
	// ErrorType is the concrete type of the returned error, resolved by the collector from
	// the itab in the site's error slot ("" when nil or unknown).
	ErrorType string
	// Incomplete marks fields that could not be read (unknown offsets, truncated strings).
	Incomplete bool
}

func base(r *Raw, kind span.EventKind) span.Event {
	incomplete := r.Incomplete
	for _, t := range r.Truncated[:3] {
		incomplete = incomplete || t
	}
	return span.Event{
		Kind:          kind,
		PID:           r.PID,
		Goid:          r.Goid,
		G:             r.G,
		Time:          r.Time,
		SpanStartTime: r.SpanStart,
		Nested:        r.Nested,
		Incomplete:    incomplete,
	}
}

func decodeReconcileEntry(r *Raw) span.Event {
	e := base(r, span.SpanStart)
	e.Controller = r.Str[0]
	e.Namespace = r.Str[1]
	e.Name = r.Str[2]
	e.ReconcileID = r.ReconcileID
	return e
}

// decodeReconcileReturn reads reconcile.Result{Requeue, RequeueAfter, ...} from the result
// slots and the error the collector resolved.
func decodeReconcileReturn(requeueSlot, afterSlot int) Decoder {
	return func(r *Raw) span.Event {
		e := base(r, span.SpanEnd)
		requeue := r.Args[requeueSlot]&0xff != 0
		after := time.Duration(int64(r.Args[afterSlot]))
		switch {
		case r.ErrorType != "":
			e.Result = span.ResultError
			e.ErrorType = r.ErrorType
			e.Error = r.ErrorMsg
		case after > 0:
			e.Result = span.ResultRequeueAfter
			e.RequeueAfter = after
		case requeue:
			e.Result = span.ResultRequeue
		default:
			e.Result = span.ResultSuccess
		}
		return e
	}
}
