// Command fakectl reconciles made-up objects through a function with the exact shape of
// controller-runtime's (*Controller[request]).Reconcile (generic receiver with a Name field,
// ctx carrying a reconcile ID, a NamespacedName request, (Result, error) results), without
// any Kubernetes dependency. The collector's tests trace it and compare what they saw with
// the ground-truth lines it prints, one JSON object per reconcile.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
)

// NamespacedName mirrors k8s.io/apimachinery/pkg/types.NamespacedName.
type NamespacedName struct{ Namespace, Name string }

// Request mirrors reconcile.Request.
type Request struct{ NamespacedName }

// Result mirrors controller-runtime v0.23+'s reconcile.Result.
type Result struct {
	Requeue      bool
	RequeueAfter time.Duration
	Priority     *int
}

// UID mirrors types.UID.
type UID string

type reconcileIDKey struct{}

// Controller mirrors the fields controller-runtime's Controller starts with.
type Controller[request comparable] struct {
	Name string
	Do   func(ctx context.Context, req request) (Result, error)
}

// Reconcile has controller-runtime's signature.
//
//go:noinline
func (c *Controller[request]) Reconcile(ctx context.Context, req request) (_ Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v [recovered]", r)
		}
	}()
	return c.Do(ctx, req)
}

type customError struct{ code int }

func (e *customError) Error() string { return fmt.Sprintf("custom %d", e.code) }

// grow recurses with a big frame so that the goroutine's stack must grow.
//
//go:noinline
func grow(n int) int {
	var pad [512]byte
	pad[n%512] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return grow(n-1) + int(pad[n%512])
}

type truth struct {
	Name         string `json:"name"`
	Outcome      string `json:"outcome"`
	ErrorType    string `json:"error_type"`
	Error        string `json:"error"`
	RequeueAfter int64  `json:"requeue_after_ns"`
	ReconcileID  string `json:"reconcile_id"`
}

var outcomes = []string{"success", "error", "wrapped", "custom", "requeue", "requeue_after", "panic"}

func main() {
	n := flag.Int("n", 70, "reconciles")
	workers := flag.Int("workers", 1, "concurrent workers")
	start := flag.String("start", "", "wait until this file exists before reconciling")
	deep := flag.Int("deep", 0, "recursion depth inside every 7th reconcile (stack growth)")
	gcEvery := flag.Int("gc-every", 0, "force a GC every N reconciles")
	interval := flag.Duration("interval", 0, "pause between two reconciles of one worker")
	stop := flag.String("stop", "", "stop early (cleanly) once this file exists")
	flag.Parse()

	if *start != "" {
		for {
			if _, err := os.Stat(*start); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	c := &Controller[Request]{Name: "fake"}
	c.Do = func(ctx context.Context, req Request) (Result, error) {
		var i int
		fmt.Sscanf(req.Name, "obj-%d", &i)
		if *deep > 0 && i%7 == 0 {
			grow(*deep)
		}
		if *gcEvery > 0 && i%*gcEvery == 0 {
			runtime.GC()
		}
		switch outcomes[i%len(outcomes)] {
		case "error":
			return Result{}, errors.New("plain failure")
		case "wrapped":
			return Result{}, fmt.Errorf("wrapping: %w", errors.New("inner"))
		case "custom":
			return Result{}, &customError{code: i}
		case "requeue":
			return Result{Requeue: true}, nil
		case "requeue_after":
			return Result{RequeueAfter: time.Duration(i+1) * time.Millisecond}, nil
		case "panic":
			panic("scripted panic")
		}
		return Result{}, nil
	}

	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
				ctx := context.WithValue(context.Background(), reconcileIDKey{}, UID(id))
				req := Request{NamespacedName{Namespace: "ns", Name: fmt.Sprintf("obj-%d", i)}}
				res, err := c.Reconcile(ctx, req)
				t := truth{Name: req.Name, ReconcileID: id, RequeueAfter: int64(res.RequeueAfter)}
				switch {
				case err != nil:
					t.Outcome, t.ErrorType, t.Error = "error", fmt.Sprintf("%T", err), err.Error()
				case res.RequeueAfter > 0:
					t.Outcome = "requeue_after"
				case res.Requeue:
					t.Outcome = "requeue"
				default:
					t.Outcome = "success"
				}
				mu.Lock()
				enc.Encode(t)
				mu.Unlock()
				if *interval > 0 {
					time.Sleep(*interval)
				}
			}
		}()
	}
	for i := 0; i < *n; i++ {
		if *stop != "" && i%64 == 0 {
			if _, err := os.Stat(*stop); err == nil {
				break
			}
		}
		next <- i
	}
	close(next)
	wg.Wait()
}
