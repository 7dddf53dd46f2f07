package span

// versionWriters is the assembler's part that remembers who made each object version a traced
// write returned (a reconcile's read version names its writer: Span.ReadVersionWriter; a write
// returning a version already made changed nothing). Its state is its own, bounded by
// Options.MaxVersions, oldest forgotten first.
type versionWriters struct {
	max  int
	made map[version]written
	// order is made's insertion order (oldest first), to bound it.
	order []version
}

type version struct{ uid, resourceVersion string }

// written is who made a version (the controller, in process pid), and when its write
// returned (monotonic ns).
type written struct {
	controller string
	pid        uint32
	end        uint64
}

func newVersionWriters(bound int) versionWriters {
	return versionWriters{max: bound, made: map[version]written{}}
}

// remember records who wrote version v, forgetting the oldest version beyond the bound.
func (vw *versionWriters) remember(v version, w written) {
	if _, ok := vw.made[v]; ok {
		return // a no-op write returned a version someone already made
	}
	if len(vw.order) >= vw.max {
		delete(vw.made, vw.order[0])
		vw.order = vw.order[1:]
	}
	vw.made[v] = w
	vw.order = append(vw.order, v)
}

// writer looks up who made version v.
func (vw *versionWriters) writer(v version) (written, bool) {
	w, ok := vw.made[v]
	return w, ok
}

// readVersionWriter names the writer of the version s read, when the write was seen here.
func (vw *versionWriters) readVersionWriter(s *Span) {
	if s.UID == "" || s.ResourceVersion == "" {
		return
	}
	w, ok := vw.made[version{s.UID, s.ResourceVersion}]
	if !ok {
		s.ReadVersionWriter = TriggerUnknown
		return
	}
	s.ReadVersionWriter = w.controller
}
