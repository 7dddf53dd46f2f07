package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"

	"github.com/reconscope/reconscope/internal/cli"
	"github.com/reconscope/reconscope/pkg/exporter"
)

const topSummary = `Usage: kubectl reconscope top [flags]

Ranks controllers and objects by reconcile rate, p99 duration or errors (--sort), from every
agent's /metrics, scraped twice --interval apart:

  CONTROLLERS  each controller of each workload, summed over the agents: reconciles per
               second, errors and p99 duration over the interval (reconscope_reconcile_total,
               reconscope_reconcile_duration_seconds); --interval 0 reads one scrape and
               counts since each agent started.
  OBJECTS      the most reconciled objects of each controller over the agents' last 5
               minutes (reconscope_hot_objects, the top 10 per controller and agent); their
               errors and p99 duration are those of the spans the agents keep (GET /spans,
               the last --recent-spans spans of each agent), "-" when none is kept.

--controller (a glob, repeatable) narrows both tables, -n/--namespace the objects table to
the objects of one namespace.`

func topCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := cli.NewCommand("top", topSummary)
	fs := cmd.Flags()
	cf := addClusterFlags(fs)
	interval := fs.Duration("interval", 5*time.Second, "time between the two scrapes the rates and p99 are computed over (0: one scrape, totals since each agent started)")
	sortBy := fs.String("sort", "rate", "rank by rate, p99 or errors")
	limit := fs.Int("limit", 20, "rows per table (0: all)")
	var controllers stringsFlag
	fs.Var(&controllers, "controller", "only this controller, a glob (repeatable)")
	var namespace string
	fs.StringVarP(&namespace, "namespace", "n", "", "only objects in this namespace (the objects table; a controller's metrics are not split by namespace)")
	cli.Complete(cmd, "sort", "rate", "p99", "errors")
	completeClusterFlags(cmd)
	cmd.RunE = cli.RunE(func([]string) int {
		if err := cf.check(); err != nil {
			return usageError(stderr, "top", "%v", err)
		}
		if *sortBy != "rate" && *sortBy != "p99" && *sortBy != "errors" {
			return usageError(stderr, "top", "--sort %q: want rate, p99 or errors", *sortBy)
		}
		if *interval < 0 {
			return usageError(stderr, "top", "--interval %s: want 0 or more", *interval)
		}
		filter, err := exporter.ParseSpanFilter(controllers, namespace, "", false)
		if err != nil {
			return usageError(stderr, "top", "--%v", err)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		sources, end, err := cf.connect(ctx, stderr)
		if err != nil {
			return failed(stderr, "top", err)
		}
		defer end()
		r, err := top(ctx, sources, *interval, filter, stderr)
		if err != nil {
			return failed(stderr, "top", err)
		}
		r.rank(*sortBy)
		r.print(stdout, *limit)
		return 0
	})
	return cmd
}

// controllerKey is one controller of one workload.
type controllerKey struct{ controller, workload string }

// controllerRow is a controller's line of top.
type controllerRow struct {
	controllerKey
	reconciles, errors float64
	rate               float64 // per second; reconciles when the report has no interval
	p99                float64 // seconds; NaN: no reconcile observed
	buckets            map[float64]float64
	count              float64
}

// objectKey is one object of one controller.
type objectKey struct{ controller, namespace, name string }

// objectRow is an object's line of top.
type objectRow struct {
	objectKey
	reconciles float64 // in the agents' hot-objects window
	errors     int     // in the spans the agents keep
	kept       int     // spans of it the agents keep
	p99        float64 // of those spans, seconds; NaN: none kept
}

// report is what top prints.
type report struct {
	interval    time.Duration
	controllers []*controllerRow
	objects     []*objectRow
}

// scrape is one agent's metric families.
type scrape map[string]*dto.MetricFamily

// top scrapes every source (twice, interval apart, unless interval is 0) and reads the spans
// they keep, and returns the report. Agents that fail are reported on stderr and left out.
func top(ctx context.Context, sources []source, interval time.Duration, filter exporter.SpanFilter, stderr io.Writer) (*report, error) {
	first := make([]scrape, len(sources))
	ok := 0
	for i, s := range sources {
		if interval == 0 {
			break
		}
		sc, err := scrapeMetrics(ctx, s)
		if err != nil {
			fmt.Fprintf(stderr, "kubectl reconscope top: agent %s: %v\n", s.name, err)
			continue
		}
		first[i] = sc
	}
	if interval > 0 {
		select {
		case <-time.After(interval):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	rep := &report{interval: interval}
	ctrl := map[controllerKey]*controllerRow{}
	objs := map[objectKey]*objectRow{}
	durations := map[objectKey][]float64{}
	for i, s := range sources {
		if interval > 0 && first[i] == nil {
			continue
		}
		second, err := scrapeMetrics(ctx, s)
		if err != nil {
			fmt.Fprintf(stderr, "kubectl reconscope top: agent %s: %v\n", s.name, err)
			continue
		}
		ok++
		addControllers(ctrl, first[i], second, filter)
		addHotObjects(objs, second, filter)
		if err := addKeptSpans(ctx, s, objs, durations, filter); err != nil {
			fmt.Fprintf(stderr, "kubectl reconscope top: agent %s: its spans: %v\n", s.name, err)
		}
	}
	if ok == 0 {
		return nil, fmt.Errorf("no agent could be scraped (%d, above)", len(sources))
	}
	secs := interval.Seconds()
	for _, c := range ctrl {
		c.rate = c.reconciles
		if secs > 0 {
			c.rate = c.reconciles / secs
		}
		c.p99 = bucketQuantile(0.99, c.buckets, c.count)
		rep.controllers = append(rep.controllers, c)
	}
	for k, o := range objs {
		o.p99 = quantile(0.99, durations[k])
		rep.objects = append(rep.objects, o)
	}
	return rep, nil
}

// scrapeMetrics reads and parses one agent's /metrics.
func scrapeMetrics(ctx context.Context, s source) (scrape, error) {
	body, err := s.get(ctx, "/metrics", nil)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	return fams, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// workloadOf names the traced workload of a series: namespace/workload, else namespace/pod.
func workloadOf(m *dto.Metric) string {
	ns, w := label(m, "k8s_namespace_name"), label(m, "k8s_workload_name")
	if w == "" {
		w = label(m, "k8s_pod_name")
	}
	if w == "" {
		w = label(m, "service_name")
	}
	if ns == "" {
		return w
	}
	return ns + "/" + w
}

// seriesKey identifies a series among an agent's by its labels.
func seriesKey(m *dto.Metric) string {
	var b strings.Builder
	for _, l := range m.GetLabel() {
		b.WriteString(l.GetName() + "=" + l.GetValue() + ",")
	}
	return b.String()
}

// addControllers adds one agent's reconciles, errors and duration buckets between before
// (nil: since the agent started) and after to rows. A series whose counter went down (the
// agent restarted) counts from 0.
func addControllers(rows map[controllerKey]*controllerRow, before, after scrape, filter exporter.SpanFilter) {
	row := func(m *dto.Metric) *controllerRow {
		k := controllerKey{label(m, "controller"), workloadOf(m)}
		r := rows[k]
		if r == nil {
			r = &controllerRow{controllerKey: k, buckets: map[float64]float64{}}
			rows[k] = r
		}
		return r
	}
	prior := func(name string) map[string]*dto.Metric {
		out := map[string]*dto.Metric{}
		if f := before[name]; f != nil {
			for _, m := range f.GetMetric() {
				out[seriesKey(m)] = m
			}
		}
		return out
	}
	delta := func(now, then float64) float64 {
		if now < then {
			return now
		}
		return now - then
	}
	if f := after["reconscope_reconcile_total"]; f != nil {
		old := prior("reconscope_reconcile_total")
		for _, m := range f.GetMetric() {
			if !filter.Match(label(m, "controller"), filter.Namespace, "", "") {
				continue
			}
			d := delta(m.GetCounter().GetValue(), old[seriesKey(m)].GetCounter().GetValue())
			r := row(m)
			r.reconciles += d
			if label(m, "result") == "error" {
				r.errors += d
			}
		}
	}
	if f := after["reconscope_reconcile_duration_seconds"]; f != nil {
		old := prior("reconscope_reconcile_duration_seconds")
		for _, m := range f.GetMetric() {
			if !filter.Match(label(m, "controller"), filter.Namespace, "", "") {
				continue
			}
			h, was := m.GetHistogram(), old[seriesKey(m)].GetHistogram()
			restarted := h.GetSampleCount() < was.GetSampleCount()
			if restarted {
				was = nil
			}
			prev := map[float64]float64{}
			for _, b := range was.GetBucket() {
				prev[b.GetUpperBound()] = float64(b.GetCumulativeCount())
			}
			r := row(m)
			r.count += float64(h.GetSampleCount() - was.GetSampleCount())
			for _, b := range h.GetBucket() {
				r.buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount()) - prev[b.GetUpperBound()]
			}
		}
	}
}

// addHotObjects adds one agent's reconscope_hot_objects to rows.
func addHotObjects(rows map[objectKey]*objectRow, sc scrape, filter exporter.SpanFilter) {
	f := sc["reconscope_hot_objects"]
	if f == nil {
		return
	}
	for _, m := range f.GetMetric() {
		k := objectKey{label(m, "controller"), label(m, "object_namespace"), label(m, "object_name")}
		if !filter.Match(k.controller, k.namespace, k.name, "") {
			continue
		}
		r := rows[k]
		if r == nil {
			r = &objectRow{objectKey: k}
			rows[k] = r
		}
		r.reconciles += m.GetGauge().GetValue()
	}
}

// addKeptSpans counts the errors and durations of the objects of rows among the spans the
// agent keeps (GET /spans).
func addKeptSpans(ctx context.Context, s source, rows map[objectKey]*objectRow, durations map[objectKey][]float64, filter exporter.SpanFilter) error {
	body, err := s.get(ctx, "/spans", query(filter, false))
	if err != nil {
		return err
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var j exporter.JSONSpan
		if json.Unmarshal(sc.Bytes(), &j) != nil {
			continue
		}
		r := rows[objectKey{j.Controller, j.Namespace, j.Name}]
		if r == nil {
			continue // not among the hot objects
		}
		r.kept++
		if j.Result == "error" {
			r.errors++
		}
		if j.Result != "abandoned" {
			durations[r.objectKey] = append(durations[r.objectKey], time.Duration(j.DurationNS).Seconds())
		}
	}
	return sc.Err()
}

// bucketQuantile is Prometheus' histogram_quantile over cumulative buckets (upper bound to
// count) of count observations: linear within the bucket; NaN without observations.
func bucketQuantile(q float64, buckets map[float64]float64, count float64) float64 {
	if count <= 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(buckets))
	for b := range buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	rank := q * count
	lower, below := 0.0, 0.0
	for _, ub := range bounds {
		n := buckets[ub]
		if n >= rank {
			if math.IsInf(ub, 1) {
				return lower // above the last finite bound: its value, as Prometheus answers
			}
			if n == below {
				return ub
			}
			return lower + (ub-lower)*(rank-below)/(n-below)
		}
		lower, below = ub, n
	}
	return lower
}

// quantile is the q-quantile of values (nearest rank); NaN when there are none.
func quantile(q float64, values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := slices.Clone(values)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// nanLast orders a and b descending, NaN last.
func nanLast(a, b float64) int {
	switch {
	case math.IsNaN(a) && math.IsNaN(b):
		return 0
	case math.IsNaN(a):
		return 1
	case math.IsNaN(b):
		return -1
	}
	return cmp.Compare(b, a)
}

// rank sorts the rows by rate, p99 or errors, the highest first; ties by the other two, then
// by name.
func (r *report) rank(by string) {
	slices.SortFunc(r.controllers, func(a, b *controllerRow) int {
		rate, p99, errs := nanLast(a.rate, b.rate), nanLast(a.p99, b.p99), nanLast(a.errors, b.errors)
		return cmp.Or(byFirst(by, rate, p99, errs), cmp.Compare(a.controller, b.controller), cmp.Compare(a.workload, b.workload))
	})
	slices.SortFunc(r.objects, func(a, b *objectRow) int {
		rate, p99, errs := nanLast(a.reconciles, b.reconciles), nanLast(a.p99, b.p99), cmp.Compare(b.errors, a.errors)
		return cmp.Or(byFirst(by, rate, p99, errs), cmp.Compare(a.controller, b.controller), cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
}

// byFirst orders two rows by the comparisons of their rate, p99 and errors: the one by names
// first, ties by the other two (rate before errors before p99).
func byFirst(by string, rate, p99, errs int) int {
	switch by {
	case "p99":
		return cmp.Or(p99, rate, errs)
	case "errors":
		return cmp.Or(errs, rate, p99)
	}
	return cmp.Or(rate, errs, p99)
}

func seconds(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// print writes the two tables, at most limit rows each (0: all).
func (r *report) print(w io.Writer, limit int) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	rateHead := fmt.Sprintf("RATE/s (%s)", r.interval)
	if r.interval == 0 {
		rateHead = "RECONCILES (since start)"
	}
	fmt.Fprintf(tw, "CONTROLLER\tWORKLOAD\t%s\tERRORS\tP99\n", rateHead)
	for i, c := range r.controllers {
		if limit > 0 && i == limit {
			break
		}
		rate := fmt.Sprintf("%.2f", c.rate)
		if r.interval == 0 {
			rate = fmt.Sprintf("%.0f", c.rate)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%s\n", c.controller, orDash(c.workload), rate, c.errors, seconds(c.p99))
	}
	fmt.Fprintln(tw, "\t\t\t\t")
	fmt.Fprintf(tw, "OBJECT\tCONTROLLER\tRECONCILES (5m)\tERRORS (kept spans)\tP99 (kept spans)\n")
	for i, o := range r.objects {
		if limit > 0 && i == limit {
			break
		}
		errs := "-"
		if o.kept > 0 {
			errs = fmt.Sprintf("%d/%d", o.errors, o.kept)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\n", joinNS(o.namespace, o.name), o.controller, o.reconciles, errs, seconds(o.p99))
	}
	_ = tw.Flush()
}

func joinNS(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
