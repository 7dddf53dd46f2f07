package collector

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"

	rbpf "github.com/reconscope/reconscope/bpf"
)

// entries is a goroutine-state map walk that yields its entries and then ends with err (nil:
// a complete walk).
type entries struct {
	keys   []rbpf.TraceG_key
	states []rbpf.TraceG_state
	err    error
	i      int
}

func (w *entries) Next(key, value any) bool {
	if w.i == len(w.keys) {
		return false
	}
	*key.(*rbpf.TraceG_key) = w.keys[w.i]
	*value.(*rbpf.TraceG_state) = w.states[w.i]
	w.i++
	return true
}

func (w *entries) Err() error { return w.err }

// TestGoroutineKeysWalk: the keys of one process are listed (live ones only when asked), and
// a walk the kernel map aborted (entries deleted and added under it, as cilium/ebpf reports
// with ErrIterationAborted) is an error, not a short list taken for the whole state.
func TestGoroutineKeysWalk(t *testing.T) {
	walk := func(err error) *entries {
		return &entries{
			keys:   []rbpf.TraceG_key{{Pid: 7, G: 1}, {Pid: 8, G: 2}, {Pid: 7, G: 3}},
			states: []rbpf.TraceG_state{{Start: 100}, {Start: 200}, {Start: 0}},
			err:    err,
		}
	}
	for _, c := range []struct {
		name string
		live bool
		err  error
		want []uint64 // goroutine addresses found
	}{
		{name: "all", want: []uint64{1, 3}},
		{name: "live", live: true, want: []uint64{1}},
		{name: "aborted", err: fmt.Errorf("%w", ebpf.ErrIterationAborted), want: []uint64{1, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys, err := goroutineKeys(walk(c.err), 7, c.live)
			var got []uint64
			for _, k := range keys {
				got = append(got, k.G)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("keys of pid 7: %v, want %v", got, c.want)
			}
			switch {
			case c.err == nil && err != nil:
				t.Errorf("complete walk: %v", err)
			case c.err != nil && !errors.Is(err, ebpf.ErrIterationAborted):
				t.Errorf("aborted walk: error %v, want one wrapping %v", err, ebpf.ErrIterationAborted)
			}
		})
	}
}
