// Command fakectl reconciles made-up objects through test/fakectl/controller, whose Reconcile
// has the exact shape of controller-runtime's (*Controller[request]).Reconcile (generic receiver
// with a Name field, ctx carrying a reconcile ID, a NamespacedName request, (Result, error)
// results, recovered panics), without any Kubernetes dependency; every reconcile goes through
// its Handle, shaped like controller-runtime's reconcileHandler. It prints one JSON object per finished
// reconcile, its ground truth (a test/groundtruth Record), which the tracer, reliability, soak
// tests compare with what they saw. Flags add load (-workers, -deep for stack growth,
// -gc-every), a call on the reconcile's goroutine (-list) and from a goroutine it starts
// (-spawn), and ways to break things on purpose: a reconcile that never returns (-hang), names,
// controller name and error messages of any length (-name-len, -controller-len, -error-len).
// With -exec it becomes another program once done, as a process that execs does.
//
// Reconcile i works on object ns/obj-i- and ends, by i modulo 7, in success, an
// *errors.errorString, a *fmt.wrapError, a *main.customError, Requeue, RequeueAfter (i+1) ms,
// or a recovered panic.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reconscope/reconscope/test/fakectl/controller"
	"github.com/reconscope/reconscope/test/groundtruth"
)

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

// ObjectList mirrors controller-runtime's client.ObjectList, as far as -list and -spawn need it.
type ObjectList interface{ Len() int }

// ConfigMapList is the list -list and -spawn's goroutines read.
type ConfigMapList struct{ items []string }

// Len implements ObjectList.
func (l *ConfigMapList) Len() int { return len(l.items) }

// informerCache mirrors controller-runtime's informer cache.
type informerCache struct{}

// List has the shape of controller-runtime's (*informerCache).List.
//
//go:noinline
func (c *informerCache) List(ctx context.Context, list ObjectList, opts ...string) error {
	if l, ok := list.(*ConfigMapList); ok {
		l.items = append(l.items, opts...)
	}
	return ctx.Err()
}

type customError struct{ code int }

func (e *customError) Error() string { return fmt.Sprintf("custom %d", e.code) }

// truth is the ground-truth line.
type truth = groundtruth.Record

var outcomes = []string{"success", "error", "wrapped", "custom", "requeue", "requeue_after", "panic"}

// pad makes s exactly n bytes long (when n > len(s)) with a recognisable filler.
func pad(s string, n int) string {
	if n <= len(s) {
		return s
	}
	return s + strings.Repeat("x", n-len(s))
}

func main() {
	n := flag.Int("n", 70, "reconciles")
	workers := flag.Int("workers", 1, "concurrent workers")
	start := flag.String("start", "", "wait until this file exists before reconciling")
	stop := flag.String("stop", "", "stop early (cleanly) once this file exists")
	interval := flag.Duration("interval", 0, "pause between two reconciles of one worker")
	hang := flag.Int("hang", -1, "the reconcile of obj-HANG never returns (it sleeps until the process dies)")
	hanging := flag.String("hanging", "", "create this file once the hanging reconcile has begun")
	nameLen := flag.Int("name-len", 0, "pad namespace and name of every object to this many bytes")
	ctlLen := flag.Int("controller-len", 0, "pad the controller's name to this many bytes")
	errLen := flag.Int("error-len", 0, "pad the message of plain errors to this many bytes")
	ctlName := flag.String("controller", "fake", "the controller's name")
	deep := flag.Int("deep", 0, "recursion depth inside every 7th reconcile (stack growth)")
	gcEvery := flag.Int("gc-every", 0, "force a GC every N reconciles")
	spawn := flag.Bool("spawn", false, "every reconcile starts a goroutine that lists from the cache ((*informerCache).List) and waits for it")
	list := flag.Bool("list", false, "every reconcile lists from the cache ((*informerCache).List) on its own goroutine, before -spawn's")
	execAfter := flag.String("exec", "", "once done, exec this command line (a program's path and its arguments, space-separated) in place of this process")
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
	c := &controller.Controller[controller.Request]{Name: pad(*ctlName, *ctlLen)}
	c.Do = func(ctx context.Context, req controller.Request) (controller.Result, error) {
		var i int
		fmt.Sscanf(req.Name, "obj-%d", &i)
		if *deep > 0 && i%7 == 0 {
			grow(*deep)
		}
		if *gcEvery > 0 && i%*gcEvery == 0 {
			runtime.GC()
		}
		if *list {
			if err := (&informerCache{}).List(ctx, &ConfigMapList{}); err != nil {
				return controller.Result{}, err
			}
		}
		if *spawn {
			done := make(chan error)
			go func() { done <- (&informerCache{}).List(ctx, &ConfigMapList{}) }()
			if err := <-done; err != nil {
				return controller.Result{}, err
			}
		}
		if i == *hang {
			if *hanging != "" {
				os.WriteFile(*hanging, nil, 0o644)
			}
			time.Sleep(24 * time.Hour)
		}
		switch outcomes[i%len(outcomes)] {
		case "error":
			return controller.Result{}, errors.New(pad("plain failure", *errLen))
		case "wrapped":
			return controller.Result{}, fmt.Errorf("wrapping: %w", errors.New("inner"))
		case "custom":
			return controller.Result{}, &customError{code: i}
		case "requeue":
			return controller.Result{Requeue: true}, nil
		case "requeue_after":
			return controller.Result{RequeueAfter: time.Duration(i+1) * time.Millisecond}, nil
		case "panic":
			panic("scripted panic")
		}
		return controller.Result{}, nil
	}

	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id := fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
				ctx := controller.WithReconcileID(context.Background(), id)
				req := controller.Request{NamespacedName: controller.NamespacedName{Namespace: pad("ns", *nameLen), Name: pad(fmt.Sprintf("obj-%d-", i), *nameLen)}}
				res, err := c.Handle(ctx, req)
				t := truth{Controller: c.Name, Namespace: req.Namespace, Name: req.Name, ReconcileID: id, RequeueAfterNS: int64(res.RequeueAfter)}
				switch {
				case err != nil:
					t.Outcome, t.ErrorType, t.Error = groundtruth.OutcomeError, fmt.Sprintf("%T", err), err.Error()
				case res.RequeueAfter > 0:
					t.Outcome = groundtruth.OutcomeRequeueAfter
				case res.Requeue:
					t.Outcome = groundtruth.OutcomeRequeue
				default:
					t.Outcome = groundtruth.OutcomeSuccess
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
		if *stop != "" && i%16 == 0 {
			if _, err := os.Stat(*stop); err == nil {
				break
			}
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if *execAfter != "" {
		argv := strings.Fields(*execAfter)
		err := syscall.Exec(argv[0], argv, os.Environ())
		fmt.Fprintf(os.Stderr, "exec %s: %v\n", argv[0], err)
		os.Exit(1)
	}
}
