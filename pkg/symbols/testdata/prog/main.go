// Command prog is a fixture for pkg/symbols tests: it returns errors through interfaces,
// has a generic type with a method (so the binary holds a shape instantiation), and functions
// with every prologue shape (no frame, small, large and huge frames).
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Request mimics controller-runtime's reconcile.Request.
type Request struct {
	Namespace, Name string
}

// Reconciler is implemented by Controller.
type Reconciler[T comparable] interface {
	Reconcile(req T) (Result, error)
}

// Result mimics reconcile.Result.
type Result struct {
	Requeue bool
	After   int64
}

// Controller is generic like controller-runtime's internal Controller[request].
type Controller[T comparable] struct {
	Name  string
	count int
	last  T
}

var errBase = errors.New("base failure")

// Reconcile returns through several RETs and wraps errors.
//
//go:noinline
func (c *Controller[T]) Reconcile(req T) (Result, error) {
	c.count++
	c.last = req
	switch c.count % 4 {
	case 0:
		return Result{}, fmt.Errorf("reconcile %v: %w", req, errBase)
	case 1:
		return Result{Requeue: true}, errors.New("plain failure")
	case 2:
		return Result{After: int64(c.count)}, nil
	}
	return Result{}, nil
}

// leaf has no frame and no stack check.
//
//go:noinline
func leaf(a, b int) int { return a*b + 1 }

// largeFrame has a frame between StackSmall and StackBig.
//
//go:noinline
func largeFrame(n int) int {
	var buf [1024]byte
	for i := range buf {
		buf[i] = byte(i * n)
	}
	return int(buf[n%len(buf)]) + len(fmt.Sprint(buf[:n%8]))
}

// hugeFrame has a frame larger than StackBig (4 KiB).
//
//go:noinline
func hugeFrame(n int) int {
	var buf [70000]byte
	for i := range buf {
		buf[i] = byte(i + n)
	}
	return int(buf[n%len(buf)]) + len(fmt.Sprint(buf[:n%8]))
}

func run(r Reconciler[Request], n int) (errs int) {
	for i := 0; i < n; i++ {
		if _, err := r.Reconcile(Request{Namespace: "ns", Name: strconv.Itoa(i)}); err != nil {
			errs++
			if errors.Is(err, errBase) {
				fmt.Fprintln(os.Stderr, "wrapped:", err)
			}
		}
	}
	return errs
}

func main() {
	c := &Controller[Request]{Name: "fixture"}
	n := len(os.Args) + 4
	fmt.Println(run(c, n), leaf(n, 3), largeFrame(n), hugeFrame(n), extra(n))
}
