package testkit

import (
	"context"
	"errors"
	"testing"
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
