// Package exporter sends finished spans where users look at them: a live tree on a terminal,
// JSON lines, OpenTelemetry traces over OTLP, and Prometheus metrics.
package exporter

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/reconscope/reconscope/pkg/ktime"
	"github.com/reconscope/reconscope/pkg/span"
)

// Writer consumes finished spans.
type Writer interface {
	Write(s *span.Span) error
}

// SpanSchema names the schema of a JSON span (docs/json.md), the value of its field "schema"
// in every JSON line the agent writes (trace and run -o json, GET /spans). It changes when a
// field changes meaning or goes away; a new field does not change it.
const SpanSchema = "reconscope.dev/span/v1"

// JSONSpan is the JSON-lines contract (docs/json.md): one object per finished reconcile.
type JSONSpan struct {
	// Schema is SpanSchema.
	Schema     string `json:"schema"`
	Controller string `json:"controller"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	// ItemType is the Go type of a work-queue item that is not a key (no namespace nor name).
	ItemType string `json:"item_type,omitempty"`
	UID      string `json:"uid"`
	// ResourceVersion is the object's resourceVersion as the reconcile first read it.
	ResourceVersion string     `json:"resource_version"`
	ReconcileID     string     `json:"reconcile_id"`
	Start           time.Time  `json:"start"`
	DurationNS      int64      `json:"duration_ns"`
	Result          string     `json:"result"`
	RequeueAfterNS  int64      `json:"requeue_after_ns"`
	ErrorType       string     `json:"error_type"`
	Error           string     `json:"error"`
	PID             uint32     `json:"pid"`
	Goid            int64      `json:"goid"`
	Exe             string     `json:"exe"`
	Pod             string     `json:"pod"`
	Container       string     `json:"container"`
	Phases          JSONPhases `json:"phases"`
	QueueWaitNS     int64      `json:"queue_wait_ns"`
	// BackoffNS is the time the object was held back before it was ready in its queue
	// (After delays, the rate limiter's backoff).
	BackoffNS int64 `json:"backoff_ns"`
	// Triggers are the work-queue adds this reconcile served: why it ran (docs/json.md);
	// TriggersDropped counts those beyond the first span.MaxTriggers.
	Triggers        []JSONTrigger `json:"triggers"`
	TriggersDropped int           `json:"triggers_dropped,omitempty"`
	// TriggerController and TriggerLagNS: who wrote the most recent watch event among the
	// triggers, and the lag from that write to this reconcile (docs/json.md).
	TriggerController string `json:"trigger_controller"`
	TriggerLagNS      int64  `json:"trigger_lag_ns"`
	// ReadVersionWriter: who wrote the version of the object the reconcile read.
	ReadVersionWriter string     `json:"read_version_writer"`
	Calls             []JSONCall `json:"calls"`
	// Fights are the controller fights this reconcile's writes took part in.
	Fights []JSONFight `json:"fights,omitempty"`
	// HotLoops are the hot loops this reconcile took part in.
	HotLoops []JSONHotLoop `json:"hot_loops,omitempty"`
	// StaleReads are its reads of versions older than one a traced write had already made.
	StaleReads []JSONStaleRead `json:"stale_reads,omitempty"`
	Noop       bool            `json:"noop"`
	Incomplete bool            `json:"incomplete"`
	// ProbeHits are the probe hits that joined this reconcile, by how the kernel ran them: what
	// tracing it cost the traced process, in traps.
	ProbeHits JSONProbeHits `json:"probe_hits"`
}

// JSONProbeHits counts a reconcile's probe hits by trap kind (docs/json.md).
type JSONProbeHits struct {
	Emulated      uint32 `json:"emulated"`
	SingleStepped uint32 `json:"single_stepped"`
}

// JSONHotLoop is one hot loop of a JSON span (docs/json.md).
type JSONHotLoop struct {
	Kind        string `json:"kind"`
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	UID         string `json:"uid"`
	Resource    string `json:"resource,omitempty"`
	Subresource string `json:"subresource,omitempty"`
	Count       int    `json:"count"`
	Start       bool   `json:"start"`
}

// JSONStaleRead is one stale read of a JSON span (docs/json.md).
type JSONStaleRead struct {
	Namespace            string `json:"namespace"`
	Name                 string `json:"name"`
	UID                  string `json:"uid"`
	Resource             string `json:"resource"`
	ResourceVersion      string `json:"resource_version"`
	NewerResourceVersion string `json:"newer_resource_version"`
	NewerWriter          string `json:"newer_writer"`
	AgeNS                int64  `json:"age_ns"`
}

// JSONTrigger is one trigger of a JSON span: an add to the work queue it served (docs/json.md).
type JSONTrigger struct {
	Kind string `json:"kind"`
	// Event, the object and Writer: the watch event the adding goroutine was delivering
	// (event, mapped, resync); absent for requeues and other adds.
	Event           string `json:"event,omitempty"`
	ObjectKind      string `json:"object_kind,omitempty"`
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name,omitempty"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resource_version,omitempty"`
	Writer          string `json:"writer,omitempty"`
	// Function is, for kind other, the function that added.
	Function string    `json:"function,omitempty"`
	Time     time.Time `json:"time"`
}

// JSONFight is one controller fight of a JSON span (docs/json.md).
type JSONFight struct {
	Namespace    string   `json:"namespace"`
	Name         string   `json:"name"`
	UID          string   `json:"uid"`
	Resource     string   `json:"resource"`
	Subresource  string   `json:"subresource"`
	Writers      []string `json:"writers"`
	PIDs         []uint32 `json:"pids"`
	Alternations int      `json:"alternations"`
	Start        bool     `json:"start"`
}

// JSONPhases is the phases object of a JSON span.
type JSONPhases struct {
	// FetchNS, DiffNS and ApplyNS: time in reads, in the rest, in writes (docs/json.md).
	FetchNS int64 `json:"fetch_ns"`
	DiffNS  int64 `json:"diff_ns"`
	ApplyNS int64 `json:"apply_ns"`
	// Deprecated: ReadNS, WriteNS and ComputeNS are the same values under their old names
	// (read_ns = fetch_ns, write_ns = apply_ns, compute_ns = diff_ns), kept for one release.
	ReadNS    int64 `json:"read_ns"`
	WriteNS   int64 `json:"write_ns"`
	ComputeNS int64 `json:"compute_ns"`
}

// JSONCall is one call of a JSON span.
type JSONCall struct {
	Kind        string `json:"kind"`
	Verb        string `json:"verb"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource"`
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	// UID and ResourceVersion are the object's as read, or as an API call returned it (after
	// a write: the version it made); "" when not seen.
	UID             string `json:"uid"`
	ResourceVersion string `json:"resource_version"`
	Status          int    `json:"status"`
	// Outcome is a cache read's: hit, not_found or error; "" for other calls.
	Outcome string `json:"outcome,omitempty"`
	// ConflictWriter is, for a write answered 409, the writer of the newer version it
	// conflicted with (untraced when not seen).
	ConflictWriter string    `json:"conflict_writer,omitempty"`
	Start          time.Time `json:"start"`
	DurationNS     int64     `json:"duration_ns"`
	// Depth is 0 for a call the reconcile made directly, 1 for a call made inside another, ...
	Depth int `json:"depth"`
}

// ToJSON converts a span to its JSON form.
func ToJSON(s *span.Span, clock ktime.Clock) JSONSpan {
	j := JSONSpan{
		Schema:     SpanSchema,
		Controller: s.Controller, Namespace: s.Namespace, Name: s.Name, ItemType: s.ItemType, UID: s.UID, ResourceVersion: s.ResourceVersion,
		ReconcileID: s.ReconcileID, Start: clock.Wall(s.Start), DurationNS: int64(s.Duration),
		Result: string(s.Result), RequeueAfterNS: int64(s.RequeueAfter), ErrorType: s.ErrorType,
		Error: s.Error, PID: s.PID, Goid: s.Goid, Exe: s.Exe, Pod: s.Pod, Container: s.Container,
		QueueWaitNS: int64(s.QueueWait), BackoffNS: int64(s.Backoff), TriggerController: s.TriggerController,
		ReadVersionWriter: s.ReadVersionWriter, Triggers: make([]JSONTrigger, 0, len(s.Triggers)), TriggersDropped: s.TriggersDropped,
		Phases: JSONPhases{FetchNS: int64(s.Phases.Fetch), DiffNS: int64(s.Phases.Diff), ApplyNS: int64(s.Phases.Apply),
			ReadNS: int64(s.Phases.Fetch), WriteNS: int64(s.Phases.Apply), ComputeNS: int64(s.Phases.Diff)},
		Calls: make([]JSONCall, 0, len(s.Calls)),
		Noop:  s.Noop, Incomplete: s.Incomplete,
		ProbeHits: JSONProbeHits{Emulated: s.ProbeHits.Emulated, SingleStepped: s.ProbeHits.SingleStepped},
	}
	if s.TriggerLagKnown {
		j.TriggerLagNS = int64(s.TriggerLag)
	}
	for _, t := range s.Triggers {
		j.Triggers = append(j.Triggers, JSONTrigger{Kind: string(t.Kind), Event: t.Event, ObjectKind: t.Object.Kind,
			Namespace: t.Object.Namespace, Name: t.Object.Name, UID: t.Object.UID, ResourceVersion: t.Object.ResourceVersion,
			Writer: t.Writer, Function: t.Function, Time: clock.Wall(t.Time)})
	}
	for _, f := range s.Fights {
		j.Fights = append(j.Fights, JSONFight{Namespace: f.Namespace, Name: f.Name, UID: f.UID, Resource: f.Resource,
			Subresource: f.Subresource, Writers: f.Writers, PIDs: f.Processes, Alternations: f.Alternations, Start: f.Start})
	}
	for _, h := range s.HotLoops {
		j.HotLoops = append(j.HotLoops, JSONHotLoop{Kind: string(h.Kind), Namespace: h.Namespace, Name: h.Name, UID: h.UID,
			Resource: h.Resource, Subresource: h.Subresource, Count: h.Count, Start: h.Start})
	}
	for _, r := range s.StaleReads {
		j.StaleReads = append(j.StaleReads, JSONStaleRead{Namespace: r.Namespace, Name: r.Name, UID: r.UID, Resource: r.Resource,
			ResourceVersion: r.ResourceVersion, NewerResourceVersion: r.NewerVersion, NewerWriter: r.NewerWriter, AgeNS: int64(r.Age)})
	}
	for _, c := range s.Calls {
		j.Calls = append(j.Calls, JSONCall{
			Kind: string(c.Kind), Verb: c.Verb, Resource: c.Resource, Subresource: c.Subresource,
			Namespace: c.Namespace, Name: c.Name, UID: c.UID, ResourceVersion: c.ResourceVersion,
			Status: c.Status, Outcome: c.Outcome, ConflictWriter: c.ConflictWriter, Start: clock.Wall(c.Start),
			DurationNS: int64(c.Duration), Depth: c.Depth,
		})
	}
	return j
}

// JSONWriter writes one JSON object per line.
type JSONWriter struct {
	mu    sync.Mutex
	w     *bufio.Writer
	line  []byte // the line being written, kept from span to span
	clock ktime.Clock
}

// NewJSONWriter returns a writer of JSON lines to w; each line is flushed as it is written.
func NewJSONWriter(w io.Writer, clock ktime.Clock) *JSONWriter {
	return &JSONWriter{w: bufio.NewWriterSize(w, jsonBuffer), clock: clock}
}

// jsonBuffer is the size of a JSONWriter's buffer: a Queue's burst of spans (one poll of the
// ring buffer: tens of spans of a few hundred bytes each at kube-controller-manager's pace)
// fits in one write, where bufio's default 4 KiB took one write for every 4 KiB of it.
const jsonBuffer = 64 << 10

// Write implements Writer.
func (j *JSONWriter) Write(s *span.Span) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.encode(s); err != nil {
		return err
	}
	return j.w.Flush()
}

// encode writes s's line into the buffer. Callers hold j.mu.
func (j *JSONWriter) encode(s *span.Span) error {
	js := ToJSON(s, j.clock)
	j.line = AppendJSON(j.line[:0], &js)
	if _, err := j.w.Write(j.line); err != nil {
		return fmt.Errorf("write JSON span: %w", err)
	}
	return nil
}

// WriteBuffered writes s as Write does, but leaves it in the buffer until Flush (or until the
// buffer is full): a Queue writing a burst of spans makes one system call, not one per span.
func (j *JSONWriter) WriteBuffered(s *span.Span) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.encode(s)
}

// Flush writes what WriteBuffered left in the buffer.
func (j *JSONWriter) Flush() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.w.Flush()
}

// TreeWriter prints each reconcile as a small tree, readable live on a terminal.
type TreeWriter struct {
	mu    sync.Mutex
	w     io.Writer
	clock ktime.Clock
}

// NewTreeWriter returns a TreeWriter.
func NewTreeWriter(w io.Writer, clock ktime.Clock) *TreeWriter {
	return &TreeWriter{w: w, clock: clock}
}

// Write implements Writer.
func (t *TreeWriter) Write(s *span.Span) error {
	var b strings.Builder
	obj := s.Name
	if s.Namespace != "" {
		obj = s.Namespace + "/" + s.Name
	}
	if obj == "" && s.ItemType != "" {
		obj = "(" + s.ItemType + ")"
	}
	fmt.Fprintf(&b, "%s %-12s %-32s %-13s %9s", t.clock.Wall(s.Start).Local().Format("15:04:05.000"), s.Controller, obj, s.Result, round(s.Duration))
	switch {
	case s.Result == span.ResultRequeueAfter:
		fmt.Fprintf(&b, "  after=%s", s.RequeueAfter)
	case s.ErrorType != "":
		fmt.Fprintf(&b, "  %s", s.ErrorType)
		if s.Error != "" {
			fmt.Fprintf(&b, ": %q", s.Error)
		}
	}
	if s.QueueWait > 0 {
		fmt.Fprintf(&b, "  queued=%s", round(s.QueueWait))
	}
	if s.Backoff > 0 {
		fmt.Fprintf(&b, "  backoff=%s", round(s.Backoff))
	}
	if s.ReconcileID != "" {
		fmt.Fprintf(&b, "  id=%s", s.ReconcileID[:min(8, len(s.ReconcileID))])
	}
	if s.Incomplete {
		b.WriteString("  (incomplete)")
	}
	fmt.Fprintf(&b, "  pid=%d", s.PID)
	b.WriteByte('\n')
	for i, c := range s.Calls {
		branch := "├─"
		if i == len(s.Calls)-1 {
			branch = "└─"
		}
		target := c.Resource
		if c.Name != "" {
			target += " " + joinNS(c.Namespace, c.Name)
		} else if c.Namespace != "" {
			target += " ns=" + c.Namespace
		}
		if c.Subresource != "" {
			target += "/" + c.Subresource
		}
		status := ""
		if c.Status != 0 {
			status = fmt.Sprintf(" %d", c.Status)
		}
		fmt.Fprintf(&b, "    %s%s %-10s %-6s %s%s %s\n", branch, strings.Repeat("  ", c.Depth), c.Kind, c.Verb, target, status, round(c.Duration))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err := io.WriteString(t.w, b.String())
	return err
}

func joinNS(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func round(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(time.Microsecond)
	}
	return d
}

// Summary counts spans by controller and result, for the report printed at exit.
type Summary struct {
	mu     sync.Mutex
	counts map[[2]string]int
}

// NewSummary returns an empty Summary.
func NewSummary() *Summary { return &Summary{counts: map[[2]string]int{}} }

// Write implements Writer.
func (s *Summary) Write(sp *span.Span) error {
	s.mu.Lock()
	s.counts[[2]string{sp.Controller, string(sp.Result)}]++
	s.mu.Unlock()
	return nil
}

// Print writes the counts, one controller/result pair per line.
func (s *Summary) Print(w io.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([][2]string, 0, len(s.counts))
	for k := range s.counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		fmt.Fprintf(w, "  %-24s %-14s %d\n", k[0], k[1], s.counts[k])
	}
}

// Multi fans a span out to several writers; it returns the first error and keeps going.
type Multi []Writer

// Write implements Writer.
func (m Multi) Write(s *span.Span) error {
	var first error
	for _, w := range m {
		if err := w.Write(s); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// JSONClock is the clock of spans made by FromJSON: their monotonic times are Unix
// nanoseconds.
var JSONClock = ktime.ClockAt(time.Unix(0, 0))

// FromJSON turns a JSON span (docs/json.md, read back from an agent) into a span whose times
// JSONClock reads, so that the writers of this package (the tree of TreeWriter) print it as
// they print the agent's own. Fields the JSON form does not carry stay empty.
func FromJSON(j JSONSpan) *span.Span {
	mono := func(t time.Time) uint64 {
		if t.IsZero() || t.UnixNano() < 0 {
			return 0
		}
		return uint64(t.UnixNano())
	}
	s := &span.Span{
		Controller: j.Controller, Namespace: j.Namespace, Name: j.Name, ItemType: j.ItemType, UID: j.UID,
		ResourceVersion: j.ResourceVersion, ReconcileID: j.ReconcileID, Start: mono(j.Start),
		Duration: time.Duration(j.DurationNS), Result: span.Result(j.Result), RequeueAfter: time.Duration(j.RequeueAfterNS),
		ErrorType: j.ErrorType, Error: j.Error, PID: j.PID, Goid: j.Goid, Exe: j.Exe, Pod: j.Pod, Container: j.Container,
		QueueWait: time.Duration(j.QueueWaitNS), Backoff: time.Duration(j.BackoffNS), TriggerController: j.TriggerController,
		ReadVersionWriter: j.ReadVersionWriter, TriggersDropped: j.TriggersDropped, Noop: j.Noop, Incomplete: j.Incomplete,
		ProbeHits: span.ProbeHits{Emulated: j.ProbeHits.Emulated, SingleStepped: j.ProbeHits.SingleStepped},
	}
	s.Phases.Fetch, s.Phases.Diff, s.Phases.Apply = time.Duration(j.Phases.FetchNS), time.Duration(j.Phases.DiffNS), time.Duration(j.Phases.ApplyNS)
	for _, c := range j.Calls {
		var call span.Call
		call.Kind, call.Verb, call.Resource, call.Subresource = span.CallKind(c.Kind), c.Verb, c.Resource, c.Subresource
		call.Namespace, call.Name, call.UID, call.ResourceVersion = c.Namespace, c.Name, c.UID, c.ResourceVersion
		call.Status, call.Outcome, call.ConflictWriter = c.Status, c.Outcome, c.ConflictWriter
		call.Start, call.Duration, call.Depth = mono(c.Start), time.Duration(c.DurationNS), c.Depth
		s.Calls = append(s.Calls, call)
	}
	return s
}
