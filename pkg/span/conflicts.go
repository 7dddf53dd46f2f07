package span

import "strconv"

// latestWrites remembers, per object (UID), the newest version a traced write made (and the
// one before it), so that a write answered 409 Conflict names the writer of a version newer
// than the one its reconcile read (Call.ConflictWriter), and a read of an older version than
// one already written is known stale (StaleRead). Bounded: the objects written longest ago
// are forgotten first.
type latestWrites struct {
	max    int
	latest map[string]latestPair
	order  []string
}

type latestWrite struct {
	resourceVersion, controller string
	end                         uint64 // when the write returned (monotonic ns)
}

// latestPair is an object's newest traced write and the one before it (prev.end 0: none).
type latestPair struct {
	cur, prev latestWrite
}

func newLatestWrites(max int) *latestWrites {
	return &latestWrites{max: max, latest: map[string]latestPair{}}
}

// wrote records that controller's write of object uid, returned at end, made version rv.
func (l *latestWrites) wrote(uid, rv, controller string, end uint64) {
	w := latestWrite{rv, controller, end}
	if p, ok := l.latest[uid]; ok {
		switch {
		case p.cur.end <= end:
			p.prev, p.cur = p.cur, w
		case p.prev.end <= end:
			p.prev = w // a write that returned before the newest one, seen after it
		}
		l.latest[uid] = p
		return
	}
	if len(l.order) >= l.max {
		delete(l.latest, l.order[0])
		l.order = l.order[1:]
	}
	l.latest[uid] = latestPair{cur: w}
	l.order = append(l.order, uid)
}

// newerThan reports whether version a is newer than version b, when both are numbers (as the
// API server's are: known); resourceVersions that are not cannot be ordered.
func newerThan(a, b string) (newer, known bool) {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return false, false
	}
	return x > y, true
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
	if !ok || w.cur.resourceVersion == readRV || w.cur.end > at {
		return WriterUntraced
	}
	if newer, known := newerThan(w.cur.resourceVersion, readRV); known && !newer {
		return WriterUntraced // the newest traced write is older than the version read
	}
	return w.cur.controller
}

// newerBefore returns the newest traced write of object uid that returned before at and made
// a version newer than rv (both numbers: versions that cannot be ordered are never stale).
func (l *latestWrites) newerBefore(uid, rv string, at uint64) (latestWrite, bool) {
	p, ok := l.latest[uid]
	if !ok || rv == "" {
		return latestWrite{}, false
	}
	for _, w := range []latestWrite{p.cur, p.prev} {
		if w.end == 0 || w.end >= at {
			continue
		}
		newer, known := newerThan(w.resourceVersion, rv)
		return w, known && newer
	}
	return latestWrite{}, false
}

// conflictWriter names, for a write c of span s answered 409, the writer of the newer version
// it conflicted with: the version read is the last read of the object (by namespace and name)
// that began before the write.
func (l *latestWrites) conflictWriter(s *Span, c *Call) string {
	uid, rv := readBefore(s, c)
	return l.otherWriter(uid, rv, c.Start+uint64(max(c.Duration, 0)))
}

// readBefore returns the object (UID) and version s last read of the object write c names,
// by namespace and name, among its reads that began before c; "" when none was seen.
func readBefore(s *Span, c *Call) (uid, rv string) {
	for i := range s.Calls {
		r := &s.Calls[i]
		if r.IsWrite() || r.UID == "" || r.Namespace != c.Namespace || r.Name != c.Name || r.Start > c.Start {
			continue
		}
		uid, rv = r.UID, r.ResourceVersion
	}
	return uid, rv
}
