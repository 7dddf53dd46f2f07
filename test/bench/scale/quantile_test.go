package scale

import (
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
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
