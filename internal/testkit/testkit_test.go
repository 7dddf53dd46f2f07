package testkit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestGo: stop cancels the stage's context and returns what the stage returned, again on a
// second call.
func TestGo(t *testing.T) {
	stopped := errors.New("stopped")
	stop := Go(t, func(ctx context.Context) error {
		<-ctx.Done()
		return stopped
	})
	for range 2 {
		if err := stop(); err != stopped {
			t.Fatalf("stop() = %v, want the stage's %v", err, stopped)
		}
	}
}

// TestPoll: Poll returns true as soon as its condition holds, and false once its timeout has
// passed with the condition never holding, without failing the test.
func TestPoll(t *testing.T) {
	calls := 0
	if !Poll(time.Minute, func() bool { calls++; return calls == 3 }) {
		t.Fatal("Poll = false for a condition that held at its third call")
	}
	if calls != 3 {
		t.Errorf("the condition was called %d times after it held at the third, want 3", calls)
	}
	start := time.Now()
	if Poll(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("Poll = true for a condition that never held")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("Poll gave up after %s, before its timeout of 50ms", took)
	}
}

// fatalOf records the message of a Fatalf instead of failing the test, and ends the goroutine
// that called it as t.Fatalf does.
type fatalOf struct {
	testing.TB
	msg string
}

func (f *fatalOf) Helper() {}
func (f *fatalOf) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestWaitForTimeout: a condition that never holds fails the test with what was awaited and
// what the condition said last; one that holds fails nothing.
func TestWaitForTimeout(t *testing.T) {
	wait := func(cond func() (bool, string)) string {
		f := &fatalOf{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			WaitFor(f, "the answer", 50*time.Millisecond, cond)
		}()
		<-done
		return f.msg
	}
	n := 0
	msg := wait(func() (bool, string) { n++; return false, fmt.Sprintf("asked %d times", n) })
	if want := fmt.Sprintf("timed out after 50ms waiting for the answer: asked %d times", n); msg != want {
		t.Errorf("WaitFor failed with %q, want %q", msg, want)
	}
	if msg := wait(func() (bool, string) { return false, "" }); msg != "timed out after 50ms waiting for the answer" {
		t.Errorf("WaitFor without a detail failed with %q", msg)
	}
	if msg := wait(func() (bool, string) { return true, "never said" }); msg != "" {
		t.Errorf("WaitFor failed with %q for a condition that held", msg)
	}
}
