// Command reconcileloop is the benchmarks' traced process. It calls the fake controller's
// Reconcile (test/fakectl/controller, which test/fakectl calls too: the exact shape of
// controller-runtime's (*Controller[request]).Reconcile) in a tight loop, and each reconcile
// makes one call through a function shaped like client-go's (*rest.Request).request and one
// through a function shaped like controller-runtime's (*informerCache).Get, which fills the
// object it is given (a typed Kubernetes object: TypeMeta, then ObjectMeta with a UID and a
// resourceVersion). So the same binary serves the reconcile probe alone, with the request
// probe, and with the cache Get probe (whose return reads the object's UID and
// resourceVersion). It measures itself and prints one JSON object at the end.
//
// Two modes:
//
//	-n N                  N reconciles back to back on one goroutine; reports CPU and wall
//	                      time per reconcile (the cost a tracer adds shows up here)
//	-rate R -duration D   R reconciles per second for D, spread over -workers goroutines;
//	                      reports how many ran (for the loss benchmark)
//	-spawn -n N           N goroutines started back to back (each ends at once; the loop waits
//	                      for them every 256), outside any reconcile or, with -in-span, all
//	                      inside one; reports CPU and wall time per goroutine (the cost of the
//	                      goroutine probes)
//
// Built with -tags otel, every reconcile is also instrumented by hand the way a controller
// would do it in-process (otel.go): an OpenTelemetry SDK span and a client_golang histogram
// observation.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reconscope/reconscope/test/bench/loopreport"
	"github.com/reconscope/reconscope/test/fakectl/controller"
)

// RestRequest mirrors the fields of client-go's rest.Request that the request probe reads.
type RestRequest struct {
	verb         string
	resource     string
	namespace    string
	resourceName string
	subresource  string
}

// request has the shape of client-go's (*Request).request(ctx, fn) error.
//
//go:noinline
func (r *RestRequest) request(ctx context.Context, fn func(*RestRequest)) error {
	if fn != nil {
		fn(r)
	}
	return nil
}

// TypeMeta and ObjectMeta mirror the first fields of apimachinery's metav1.TypeMeta and
// metav1.ObjectMeta, in their order: the cache Get probe reads UID and ResourceVersion at the
// offsets of these fields.
type TypeMeta struct{ Kind, APIVersion string }

type ObjectMeta struct {
	Name            string
	GenerateName    string
	Namespace       string
	SelfLink        string
	UID             controller.UID
	ResourceVersion string
	Generation      int64
}

// ConfigMap is a typed object: TypeMeta, then ObjectMeta, like every Kubernetes type.
type ConfigMap struct {
	TypeMeta
	ObjectMeta
	Data map[string]string
}

func (c *ConfigMap) GetName() string { return c.Name }

// Object stands for client.Object: the cache fills the object an interface points to.
type Object interface{ GetName() string }

// GetOption stands for client.GetOption.
type GetOption interface{ ApplyToGet() }

// informerCache mirrors controller-runtime's cache, whose Get the cache Get probe watches.
type informerCache struct {
	objects []ConfigMap
}

// Get has the shape of controller-runtime's (*informerCache).Get(ctx, key, obj, opts...)
// error: it copies the cached object of key into obj, as the real cache's deep copy does.
//
//go:noinline
func (c *informerCache) Get(ctx context.Context, key controller.NamespacedName, obj Object, opts ...GetOption) error {
	cm, ok := obj.(*ConfigMap)
	if !ok {
		return fmt.Errorf("unsupported object %T", obj)
	}
	i := len(key.Name) % len(c.objects)
	cm.ObjectMeta = c.objects[i].ObjectMeta
	return nil
}

// instrument, when set (otel.go), wraps every reconcile in hand-made instrumentation.
var instrument func(ctx context.Context, c *controller.Controller[controller.Request], req controller.Request) (context.Context, func(controller.Result, error))

// pool is how many distinct objects (and reconcile IDs) the loop cycles through.
const pool = 1024

func cpuNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

func main() {
	n := flag.Int("n", 100000, "reconciles (tight-loop mode)")
	warmup := flag.Int("warmup", 2000, "reconciles before the timed loop (tight-loop mode)")
	rate := flag.Float64("rate", 0, "reconciles per second in all (paced mode; 0: tight loop)")
	duration := flag.Duration("duration", 2*time.Second, "how long to run (paced mode)")
	workers := flag.Int("workers", 4, "worker goroutines (paced mode)")
	start := flag.String("start", "", "wait until this file exists before reconciling")
	spawn := flag.Bool("spawn", false, "start N goroutines instead of running N reconciles (tight-loop mode)")
	inSpan := flag.Bool("in-span", false, "with -spawn: start them inside one reconcile")
	handler := flag.Bool("handler", false, "call every reconcile through Handle, shaped like controller-runtime's reconcileHandler")
	flag.Parse()

	c := &controller.Controller[controller.Request]{Name: "bench"}
	api := &RestRequest{verb: "PATCH", resource: "configmaps", namespace: "team-a", resourceName: "web-config", subresource: "status"}
	cache := &informerCache{objects: make([]ConfigMap, pool)}
	var obj ConfigMap
	c.Do = func(ctx context.Context, req controller.Request) (controller.Result, error) {
		if err := cache.Get(ctx, req.NamespacedName, &obj); err != nil {
			return controller.Result{}, err
		}
		api.request(ctx, nil)
		return controller.Result{}, nil
	}
	ctxs := make([]context.Context, pool)
	reqs := make([]controller.Request, pool)
	for i := range pool {
		id := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
		ctxs[i] = controller.WithReconcileID(context.Background(), id)
		reqs[i] = controller.Request{NamespacedName: controller.NamespacedName{Namespace: "team-a", Name: fmt.Sprintf("web-%d", i)}}
		cache.objects[i].ObjectMeta = ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "team-a",
			UID:             controller.UID(fmt.Sprintf("%08x-1111-4000-8000-%012x", i, i)),
			ResourceVersion: fmt.Sprint(100000 + i)}
	}
	reconcile := func(i int) {
		ctx, req := ctxs[i%pool], reqs[i%pool]
		if instrument != nil {
			ictx, done := instrument(ctx, c, req)
			res, err := c.Reconcile(ictx, req)
			done(res, err)
			return
		}
		if *handler {
			c.Handle(ctx, req)
			return
		}
		c.Reconcile(ctx, req)
	}

	if *start != "" {
		for {
			if _, err := os.Stat(*start); err == nil {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}

	r := loopreport.Report{Instrument: instrument != nil}
	if *spawn {
		r.Mode, r.Workers, r.N = "spawn", 1, *n
		runtime.LockOSThread()
		spawnLoop(*warmup)
		runtime.GC()
		cpu0, wall0 := cpuNow(), time.Now()
		if *inSpan {
			c.Do = func(context.Context, controller.Request) (controller.Result, error) {
				spawnLoop(*n)
				return controller.Result{}, nil
			}
			c.Reconcile(ctxs[0], reqs[0])
		} else {
			spawnLoop(*n)
		}
		r.Timed(int64(time.Since(wall0)), cpuNow()-cpu0)
	} else if *rate > 0 {
		r.Mode, r.Workers = "paced", *workers
		r.N, r.WallNs = paced(reconcile, *rate, *duration, *workers)
		r.Rate = float64(r.N) / (float64(r.WallNs) / 1e9)
	} else {
		r.Mode, r.Workers, r.N = "loop", 1, *n
		runtime.LockOSThread()
		for i := range *warmup {
			reconcile(i)
		}
		runtime.GC()
		cpu0, wall0 := cpuNow(), time.Now()
		for i := range *n {
			reconcile(i)
		}
		r.Timed(int64(time.Since(wall0)), cpuNow()-cpu0)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		os.Exit(1)
	}
}

// spawnLoop starts n goroutines that end at once, waiting for them every 256.
func spawnLoop(n int) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go wg.Done()
		if i%256 == 255 {
			wg.Wait()
		}
	}
	wg.Wait()
}

// paced runs reconciles at rate per second for d on workers goroutines: a pacer hands out
// what is due every millisecond. It returns how many ran and how long that took.
func paced(reconcile func(int), rate float64, d time.Duration, workers int) (int, int64) {
	due := make(chan int, 1<<16)
	var done atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range due {
				reconcile(i)
				done.Add(1)
			}
		}()
	}
	t0 := time.Now()
	sent := 0
	tick := time.NewTicker(time.Millisecond)
	for now := range tick.C {
		el := now.Sub(t0)
		if el >= d {
			break
		}
		want := int(rate * el.Seconds())
		for ; sent < want; sent++ {
			select {
			case due <- sent:
			default: // workers are behind by more than the queue: the rate is not reachable
				want = sent
			}
		}
	}
	tick.Stop()
	close(due)
	wg.Wait()
	return int(done.Load()), int64(time.Since(t0))
}
