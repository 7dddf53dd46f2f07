package scale

import (
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

func TestQuantile(t *testing.T) {
	// 100 samples: 10 in (0, 0.001], 80 in (0.001, 0.01], 10 in (0.01, 0.1].
	b := map[float64]uint64{0.001: 10, 0.01: 90, 0.1: 100, 1: 100, math.Inf(1): 100}
	for _, c := range []struct{ q, want float64 }{{0.5, 0.001 + 0.009*40/80}, {0.99, 0.01 + 0.09*9/10}, {0.05, 0.0005}} {
		if got := quantile(c.q, b); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
}

func TestScrapeBuckets(t *testing.T) {
	const text = `# TYPE workqueue_work_duration_seconds histogram
workqueue_work_duration_seconds_bucket{name="a",le="0.001"} 10
workqueue_work_duration_seconds_bucket{name="a",le="0.01"} 90
workqueue_work_duration_seconds_bucket{name="a",le="+Inf"} 100
workqueue_work_duration_seconds_sum{name="a"} 1
workqueue_work_duration_seconds_count{name="a"} 100
workqueue_work_duration_seconds_bucket{name="b",le="0.001"} 1
workqueue_work_duration_seconds_bucket{name="b",le="0.01"} 1
workqueue_work_duration_seconds_bucket{name="b",le="+Inf"} 1
workqueue_work_duration_seconds_sum{name="b"} 1
workqueue_work_duration_seconds_count{name="b"} 1
# TYPE go_sched_goroutines_created_goroutines_total counter
go_sched_goroutines_created_goroutines_total 1234
`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, text) }))
	defer srv.Close()
	count, buckets, goroutines, ok, err := scrape(target{metrics: srv.URL, queues: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[float64]uint64{0.001: 10, 0.01: 90, math.Inf(1): 100}
	if count != 100 || !maps.Equal(buckets, want) || goroutines != 1234 || !ok {
		t.Errorf("scrape = %d, %v, %d goroutines (%v); want 100, %v, 1234 goroutines", count, buckets, goroutines, ok, want)
	}
}

// TestScrapeNativeBuckets: a program that keeps a native histogram beside the classic buckets
// (as controller-runtime does for its work queues), served by client_golang's own handler: the
// scrape reads the native buckets, and quantiles from them fall within a bucket's width (9 %)
// of the exact ones, where the classic buckets (powers of ten) would put the p99 of these
// durations anywhere in (1 ms, 10 ms].
func TestScrapeNativeBuckets(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:                        "workqueue_work_duration_seconds",
		Buckets:                     prometheus.ExponentialBuckets(10e-9, 10, 12),
		NativeHistogramBucketFactor: 1.1, NativeHistogramMaxBucketNumber: 100,
	}, []string{"name"})
	reg.MustRegister(h)
	// 1000 durations: 0.1 ms to 1.09 ms by 1 µs, and 10 of 3 ms (the top 1 %).
	var all []float64
	for i := range 990 {
		all = append(all, 100e-6+float64(i)*1e-6)
	}
	for range 10 {
		all = append(all, 3e-3)
	}
	for _, d := range all {
		h.WithLabelValues("a").Observe(d)
	}
	h.WithLabelValues("b").Observe(1) // another queue, left out
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	before, _, _, _, err := scrape(target{metrics: srv.URL, queues: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	count, buckets, _, _, err := scrape(target{metrics: srv.URL, queues: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	if before != 1000 || count != 1000 || buckets[math.Inf(1)] != 1000 {
		t.Fatalf("count %d and %d, +Inf %d, want 1000", before, count, buckets[math.Inf(1)])
	}
	if len(buckets) < 100 {
		t.Fatalf("%d buckets: the classic ones (12), not the native", len(buckets))
	}
	sorted := slices.Clone(all)
	slices.Sort(sorted)
	for _, q := range []float64{0.5, 0.9, 0.985} {
		exact := sorted[int(q*float64(len(sorted)))-1]
		if got := quantile(q, buckets); math.Abs(got-exact) > 0.1*exact {
			t.Errorf("p%g from the native buckets %v, exact %v", q*100, got, exact)
		}
	}
	if got := quantile(0.995, buckets); got < 2.7e-3 || got > 3.3e-3 {
		t.Errorf("p99.5 from the native buckets %v, want about 3 ms", got)
	}
}

// TestNativeBucketsWidened: a histogram whose program widened its buckets (schema 2, twice the
// width of controller-runtime's 3) is read onto the same bounds as before, its buckets' bounds
// being among them.
func TestNativeBucketsWidened(t *testing.T) {
	schema, zero := int32(2), uint64(1)
	offset, length := int32(-40), uint32(2)
	h := &dto.Histogram{Schema: &schema, ZeroCount: &zero,
		PositiveSpan:  []*dto.BucketSpan{{Offset: &offset, Length: &length}},
		PositiveDelta: []int64{5, -2}} // 5 in (2^(-41/4), 2^(-40/4)], 3 in (2^(-40/4), 2^(-39/4)]
	got := nativeBuckets(h)
	for _, c := range []struct {
		le   float64
		want uint64
	}{{math.Exp2(-81.0 / 8), 1}, {math.Exp2(-80.0 / 8), 6}, {math.Exp2(-79.0 / 8), 6}, {math.Exp2(-78.0 / 8), 9}, {math.Exp2(54.0 / 8), 9}} {
		if got[c.le] != c.want {
			t.Errorf("cumulative count at %g = %d, want %d", c.le, got[c.le], c.want)
		}
	}
}
