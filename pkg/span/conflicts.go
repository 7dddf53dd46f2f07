package span

import "strconv"

// latestWrites remembers, per object (UID), the newest version a traced write made, so that a
// write answered 409 Conflict names the writer of a version newer than the one its reconcile
// read (Call.ConflictWriter). Bounded: the objects written longest ago are forgotten first.
type latestWrites struct {
	max    int
	latest map[string]latestWrite
	order  []string
}

type latestWrite struct {
	resourceVersion, controller string
	end                         uint64 // when the write returned (monotonic ns)
}

func newLatestWrites(max int) *latestWrites {
	return &latestWrites{max: max, latest: map[string]latestWrite{}}
}

// wrote records that controller's write of object uid, returned at end, made version rv.
func (l *latestWrites) wrote(uid, rv, controller string, end uint64) {
	if prev, ok := l.latest[uid]; ok {
		if prev.end <= end {
			l.latest[uid] = latestWrite{rv, controller, end}
		}
		return
	}
	if len(l.order) >= l.max {
		delete(l.latest, l.order[0])
		l.order = l.order[1:]
	}
	l.latest[uid] = latestWrite{rv, controller, end}
	l.order = append(l.order, uid)
}

// otherWriter names the writer of the version of object uid newer than readRV that a write
// answered 409 at time at conflicted with: the newest traced write of the object that returned
// before then and made another version (a newer one, where both versions are numbers, as the
// API server's are); WriterUntraced when none was seen (kubectl, an untraced controller, another
// node). "" when the version read is not known.
func (l *latestWrites) otherWriter(uid, readRV string, at uint64) string {
	if uid == "" || readRV == "" {
		return ""
	}
	w, ok := l.latest[uid]
	if !ok || w.resourceVersion == readRV || w.end > at {
		return WriterUntraced
	}
	if a, err1 := strconv.ParseUint(w.resourceVersion, 10, 64); err1 == nil {
		if b, err2 := strconv.ParseUint(readRV, 10, 64); err2 == nil && a <= b {
			return WriterUntraced // the newest traced write is older than the version read
		}
	}
	return w.controller
}

// conflictWriter names, for a write c of span s answered 409, the writer of the newer version
// it conflicted with: the version read is the last read of the object (by namespace and name)
// that began before the write.
func (l *latestWrites) conflictWriter(s *Span, c *Call) string {
	uid, rv := "", ""
	for i := range s.Calls {
		r := &s.Calls[i]
		if r.IsWrite() || r.UID == "" || r.Namespace != c.Namespace || r.Name != c.Name || r.Start > c.Start {
			continue
		}
		uid, rv = r.UID, r.ResourceVersion
	}
	return l.otherWriter(uid, rv, c.Start+uint64(max(c.Duration, 0)))
}
