package exporter

import (
	"bufio"
	"encoding/json"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/span"
)

// Bounds of a SpanStream (docs/kubectl-plugin.md).
const (
	// DefaultRecentSpans is how many of the last spans a SpanStream keeps for a new reader.
	DefaultRecentSpans = 1000
	// MaxRecentSpans bounds --recent-spans: at a few KiB a span, tens of MiB at most.
	MaxRecentSpans = 10000
	// FollowerBacklog is how many spans a follower may be behind: a follower that falls
	// further behind is dropped (its response ends) and counted, never waited for.
	FollowerBacklog = 1024
	// MaxFollowers is how many followers a SpanStream serves at once; more are answered 503.
	MaxFollowers = 32
)

// SpanStream keeps the last spans in a ring and hands new ones to followers; it serves both
// as JSON lines (GET /spans, docs/kubectl-plugin.md). Write never blocks: a follower whose
// backlog is full is dropped and counted (ReadersDropped).
type SpanStream struct {
	clock ktime.Clock

	mu        sync.Mutex
	ring      []*span.Span // the last len(ring) spans; next is the oldest once full
	next      int
	full      bool
	followers map[*follower]struct{}

	readersDropped atomic.Uint64
}

type follower struct {
	ch chan *span.Span
}

// NewSpanStream returns a stream keeping the last recent spans (DefaultRecentSpans when
// recent <= 0, at most MaxRecentSpans), whose times clock turns into wall-clock time.
func NewSpanStream(recent int, clock ktime.Clock) *SpanStream {
	if recent <= 0 {
		recent = DefaultRecentSpans
	}
	recent = min(recent, MaxRecentSpans)
	return &SpanStream{clock: clock, ring: make([]*span.Span, recent), followers: map[*follower]struct{}{}}
}

// Write implements Writer: it keeps s in the ring and hands it to every follower that has
// room; the others are dropped. The span must not be changed after.
func (st *SpanStream) Write(s *span.Span) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ring[st.next] = s
	st.next++
	if st.next == len(st.ring) {
		st.next, st.full = 0, true
	}
	for f := range st.followers {
		select {
		case f.ch <- s:
		default:
			close(f.ch)
			delete(st.followers, f)
			st.readersDropped.Add(1)
		}
	}
	return nil
}

// recent returns the spans of the ring, oldest first; with follow, it also registers a
// follower that gets every span written after them (nil when MaxFollowers follow already).
func (st *SpanStream) recent(follow bool) ([]*span.Span, *follower, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []*span.Span
	if st.full {
		out = append(out, st.ring[st.next:]...)
	}
	out = append(out, st.ring[:st.next]...)
	if !follow {
		return out, nil, true
	}
	if len(st.followers) >= MaxFollowers {
		return nil, nil, false
	}
	f := &follower{ch: make(chan *span.Span, FollowerBacklog)}
	st.followers[f] = struct{}{}
	return out, f, true
}

// leave unregisters f (its reader went away).
func (st *SpanStream) leave(f *follower) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.followers[f]; ok {
		delete(st.followers, f)
		close(f.ch)
	}
}

// ReadersDropped is how many followers were dropped because they fell FollowerBacklog spans
// behind.
func (st *SpanStream) ReadersDropped() uint64 { return st.readersDropped.Load() }

// Followers is how many readers follow the stream now.
func (st *SpanStream) Followers() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.followers)
}

// Register adds the stream's metrics to reg: reconscope_span_stream_readers and
// reconscope_span_stream_readers_dropped_total.
func (st *SpanStream) Register(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "reconscope_span_stream_readers",
			Help: "Readers following GET /spans?follow=1 now.",
		}, func() float64 { return float64(st.Followers()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "reconscope_span_stream_readers_dropped_total",
			Help: "Readers of GET /spans?follow=1 dropped because they fell more than " + strconv.Itoa(FollowerBacklog) + " spans behind (their response ended; the tracer never waits for a reader).",
		}, func() float64 { return float64(st.ReadersDropped()) }),
	)
}

// ServeHTTP serves GET /spans: the spans of the ring as JSON lines (docs/json.md), oldest
// first, then with follow=1 every new span until the client goes away or falls behind.
// The query's controller (a glob, repeatable), namespace, object and errors=1 select spans
// as SpanFilter does.
func (st *SpanStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	filter, err := ParseSpanFilter(q["controller"], q.Get("namespace"), q.Get("object"), q.Get("errors") == "1" || q.Get("errors") == "true")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	follow := q.Get("follow") == "1" || q.Get("follow") == "true"
	spans, f, ok := st.recent(follow)
	if !ok {
		http.Error(w, "too many readers follow the span stream: try again later", http.StatusServiceUnavailable)
		return
	}
	if f != nil {
		defer st.leave(f)
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	flusher, _ := w.(http.Flusher)
	flush := func() bool {
		if bw.Flush() != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	for _, s := range spans {
		if filter.MatchSpan(s) && enc.Encode(ToJSON(s, st.clock)) != nil {
			return
		}
	}
	if !flush() || f == nil {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case s, ok := <-f.ch:
			if !ok {
				return // dropped: too far behind
			}
			if filter.MatchSpan(s) && enc.Encode(ToJSON(s, st.clock)) != nil {
				return
			}
			if len(f.ch) > 0 {
				continue // more waiting: written together
			}
			if !flush() {
				return
			}
		}
	}
}

// SpanFilter selects spans by controller (globs, path.Match syntax; any when empty), the
// object's namespace and name (any when empty), and errors only.
type SpanFilter struct {
	Controllers []string
	Namespace   string
	Object      string
	Errors      bool
}

// ParseSpanFilter checks the controller globs and returns the filter.
func ParseSpanFilter(controllers []string, namespace, object string, errorsOnly bool) (SpanFilter, error) {
	f := SpanFilter{Namespace: namespace, Object: object, Errors: errorsOnly}
	for _, c := range controllers {
		for _, g := range strings.Split(c, ",") {
			if g = strings.TrimSpace(g); g == "" {
				continue
			}
			if _, err := path.Match(g, ""); err != nil {
				return f, &filterError{glob: g, err: err}
			}
			f.Controllers = append(f.Controllers, g)
		}
	}
	return f, nil
}

type filterError struct {
	glob string
	err  error
}

func (e *filterError) Error() string { return "controller " + e.glob + ": " + e.err.Error() }

// Match reports whether a span of controller on object namespace/name, with result, is
// selected. An error is result "error".
func (f SpanFilter) Match(controller, namespace, name, result string) bool {
	if f.Namespace != "" && namespace != f.Namespace {
		return false
	}
	if f.Object != "" && name != f.Object {
		return false
	}
	if f.Errors && result != string(span.ResultError) {
		return false
	}
	if len(f.Controllers) == 0 {
		return true
	}
	for _, g := range f.Controllers {
		if ok, _ := path.Match(g, controller); ok {
			return true
		}
	}
	return false
}

// MatchSpan is Match for a span.
func (f SpanFilter) MatchSpan(s *span.Span) bool {
	return f.Match(s.Controller, s.Namespace, s.Name, string(s.Result))
}

// AgentHandler is what the agent serves on its metrics address: m's /metrics, /healthz and
// /readyz, and st's /spans (none when st is nil).
func AgentHandler(m *Metrics, st *SpanStream) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", m.Handler())
	if st != nil {
		mux.Handle("/spans", st)
	}
	return mux
}
