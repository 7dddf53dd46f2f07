package exporter

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/span"
)

func streamSpan(i int, controller, result string) *span.Span {
	return &span.Span{Controller: controller, Namespace: "ns", Name: fmt.Sprintf("obj-%d", i), Result: span.Result(result),
		Start: uint64(i) * uint64(time.Millisecond), Duration: time.Millisecond}
}

// readLines reads JSON spans from body until n were read or the body ends.
func readLines(t *testing.T, r *bufio.Reader, n int) []JSONSpan {
	t.Helper()
	var out []JSONSpan
	for len(out) < n {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break
		}
		var j JSONSpan
		if err := json.Unmarshal(line, &j); err != nil {
			t.Fatalf("not a JSON span: %q: %v", line, err)
		}
		if j.Schema != SpanSchema {
			t.Fatalf("GET /spans line with schema %q, want %q: %s", j.Schema, SpanSchema, line)
		}
		out = append(out, j)
	}
	return out
}

func names(spans []JSONSpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// TestSpanStreamRingBound: a reader gets the last N spans only, oldest first.
func TestSpanStreamRingBound(t *testing.T) {
	st := NewSpanStream(3, ktime.ClockAt(time.Unix(0, 0)))
	for i := range 5 {
		_ = st.Write(streamSpan(i, "widgets", "success"))
	}
	srv := httptest.NewServer(st)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/spans")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := names(readLines(t, bufio.NewReader(resp.Body), 10))
	if strings.Join(got, ",") != "obj-2,obj-3,obj-4" {
		t.Errorf("GET /spans = %v, want the last 3: obj-2,obj-3,obj-4", got)
	}
	if NewSpanStream(MaxRecentSpans*2, ktime.Clock{}).ring == nil || len(NewSpanStream(MaxRecentSpans*2, ktime.Clock{}).ring) != MaxRecentSpans {
		t.Errorf("a ring asked for %d spans is not bounded by %d", MaxRecentSpans*2, MaxRecentSpans)
	}
}

// TestSpanStreamFollow: with follow=1 a reader gets the ring, then the spans written after,
// once each, filtered as asked.
func TestSpanStreamFollow(t *testing.T) {
	st := NewSpanStream(10, ktime.ClockAt(time.Unix(0, 0)))
	_ = st.Write(streamSpan(0, "widgets", "success"))
	_ = st.Write(streamSpan(1, "gadgets", "error"))
	srv := httptest.NewServer(st)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/spans?follow=1&controller=widg*")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	if got := names(readLines(t, r, 1)); strings.Join(got, ",") != "obj-0" {
		t.Fatalf("ring = %v, want obj-0 (gadgets filtered out)", got)
	}
	// The follower registers with the ring's snapshot: before the first line.
	testkit.Eventually(t, "the follower to register", 10*time.Second, func() bool { return st.Followers() != 0 })
	_ = st.Write(streamSpan(2, "gadgets", "success"))
	_ = st.Write(streamSpan(3, "widgets", "error"))
	if got := names(readLines(t, r, 1)); strings.Join(got, ",") != "obj-3" {
		t.Errorf("followed = %v, want obj-3", got)
	}
	resp.Body.Close()
	// the reader left: the stream forgets it
	// Spans keep coming while it waits: the handler ends on its request's context or on a write
	// that fails, whichever comes first.
	testkit.Poll(10*time.Second, func() bool {
		if st.Followers() == 0 {
			return true
		}
		_ = st.Write(streamSpan(4, "widgets", "success"))
		return false
	})
	if n := st.Followers(); n != 0 {
		t.Errorf("%d followers after the reader closed its connection", n)
	}
	if st.ReadersDropped() != 0 {
		t.Errorf("a reader that left is counted as dropped: %d", st.ReadersDropped())
	}
}

// TestSpanStreamSlowReaderDropped: a follower that reads nothing is dropped once it is
// FollowerBacklog spans behind; Write never blocks on it, and the drop is counted in the
// metric a user sees.
func TestSpanStreamSlowReaderDropped(t *testing.T) {
	st := NewSpanStream(10, ktime.ClockAt(time.Unix(0, 0)))
	reg := prometheus.NewRegistry()
	st.Register(reg)
	_, f, ok := st.recent(true) // a follower whose handler never reads its channel
	if !ok || f == nil {
		t.Fatal("no follower")
	}
	for i := range FollowerBacklog + 1 {
		_ = st.Write(streamSpan(i, "widgets", "success")) // would block forever if Write waited
	}
	if got := st.ReadersDropped(); got != 1 {
		t.Errorf("readers dropped = %d, want 1", got)
	}
	if n := st.Followers(); n != 0 {
		t.Errorf("%d followers left", n)
	}
	want := "# HELP reconscope_span_stream_readers_dropped_total Readers of GET /spans?follow=1 dropped because they fell more than 1024 spans behind (their response ended; the tracer never waits for a reader).\n# TYPE reconscope_span_stream_readers_dropped_total counter\nreconscope_span_stream_readers_dropped_total 1\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "reconscope_span_stream_readers_dropped_total"); err != nil {
		t.Error(err)
	}
	// its channel holds what it had room for, then ends: the handler ends the response
	n := 0
	for range f.ch {
		n++
	}
	if n != FollowerBacklog {
		t.Errorf("dropped follower had %d spans queued, want %d", n, FollowerBacklog)
	}
}

// TestSpanStreamHTTPSlowReader: over HTTP, a client that stops reading is dropped and its
// response ends, while the writer keeps going.
func TestSpanStreamHTTPSlowReader(t *testing.T) {
	st := NewSpanStream(1, ktime.ClockAt(time.Unix(0, 0)))
	srv := httptest.NewServer(st)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/spans?follow=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	testkit.Eventually(t, "the follower to register", 10*time.Second, func() bool { return st.Followers() != 0 })
	big := strings.Repeat("x", 4096) // fills the socket buffers quickly
	for i := 0; st.ReadersDropped() == 0; i++ {
		s := streamSpan(i, "widgets", "error")
		s.Error = big
		_ = st.Write(s)
		if i%FollowerBacklog == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Logf("body: %v", err)
	}
	if n := st.Followers(); n != 0 {
		t.Errorf("%d followers after the drop", n)
	}
}

func TestSpanStreamBadFilter(t *testing.T) {
	st := NewSpanStream(1, ktime.Clock{})
	rec := httptest.NewRecorder()
	st.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/spans?controller=%5B", nil))
	if rec.Code != http.StatusBadRequest {
		t.Errorf("controller=[ answered %d, want 400", rec.Code)
	}
}

func TestSpanFilter(t *testing.T) {
	for _, tt := range []struct {
		name                        string
		f                           SpanFilter
		controller, ns, obj, result string
		want                        bool
	}{
		{"any", SpanFilter{}, "a", "ns", "o", "success", true},
		{"glob", SpanFilter{Controllers: []string{"replica*"}}, "replicaset", "ns", "o", "success", true},
		{"glob miss", SpanFilter{Controllers: []string{"replica*"}}, "deployment", "ns", "o", "success", false},
		{"namespace", SpanFilter{Namespace: "a"}, "c", "b", "o", "success", false},
		{"object", SpanFilter{Object: "o"}, "c", "ns", "o", "success", true},
		{"object miss", SpanFilter{Object: "p"}, "c", "ns", "o", "success", false},
		{"errors", SpanFilter{Errors: true}, "c", "ns", "o", "requeue", false},
		{"errors hit", SpanFilter{Errors: true}, "c", "ns", "o", "error", true},
	} {
		if got := tt.f.Match(tt.controller, tt.ns, tt.obj, tt.result); got != tt.want {
			t.Errorf("%s: Match = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestFromJSONTree: a span read back from its JSON prints the same tree as the span itself.
func TestFromJSONTree(t *testing.T) {
	clock := ktime.ClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := &span.Span{Controller: "widgets", Namespace: "ns", Name: "w", Result: span.ResultError, ErrorType: "*errors.StatusError",
		Error: "boom", Start: 1000, Duration: 3 * time.Millisecond, QueueWait: time.Millisecond, ReconcileID: "0123456789", PID: 42}
	s.Calls = []span.Call{
		{CallInfo: span.CallInfo{Kind: span.CallAPI, Verb: "update", Resource: "widgets", Namespace: "ns", Name: "w", Status: 409}, Start: 1100, Duration: time.Millisecond},
		{CallInfo: span.CallInfo{Kind: span.CallCacheGet, Verb: "get", Resource: "secrets", Namespace: "ns", Name: "s"}, Start: 1200, Duration: time.Microsecond, Depth: 1},
	}
	var direct, viaJSON strings.Builder
	_ = NewTreeWriter(&direct, clock).Write(s)
	b, _ := json.Marshal(ToJSON(s, clock))
	var j JSONSpan
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	_ = NewTreeWriter(&viaJSON, JSONClock).Write(FromJSON(j))
	if direct.String() != viaJSON.String() {
		t.Errorf("tree from JSON:\n%s\nwant:\n%s", viaJSON.String(), direct.String())
	}
}
