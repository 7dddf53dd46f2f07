package tracer

import "time"

// HoldInspections takes every inspection slot, so that executables wait to be inspected until
// the returned function is called.
func (t *Tracer) HoldInspections() (release func()) {
	for range cap(t.inspect) {
		t.inspect <- struct{}{}
	}
	return func() {
		for range cap(t.inspect) {
			<-t.inspect
		}
	}
}

// Users returns how many callers hold or wait for the executable of process pid.
func (t *Tracer) Users(pid int) int {
	id, err := t.col.FileID(t.proc.ExeLink(pid))
	if err != nil {
		return -1
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.exes[id]; e != nil {
		return e.users
	}
	return 0
}

// SetGrace changes Options.Grace while the tracer runs: an executable idle for longer than d
// is detached at the next housekeeping.
func (t *Tracer) SetGrace(d time.Duration) {
	t.mu.Lock()
	t.opts.Grace = d
	t.mu.Unlock()
}
