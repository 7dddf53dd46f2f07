package span

import "time"

// StaleRead is a read, inside a reconcile, of a version of an object older than one a traced
// write had already made before the read began: the reconcile acted on the past (a lagging or
// paused informer cache, the controller's own write not yet in its cache).
type StaleRead struct {
	Namespace, Name, UID string
	// Resource is the read's resource as its call names it ("" for the reconciled object's
	// read at --detail reconcile, which is no call).
	Resource string
	// ResourceVersion is the version read; NewerVersion the newer one a traced write had made,
	// NewerWriter that write's controller.
	ResourceVersion, NewerVersion, NewerWriter string
	// Age is how long before the read began the newer version's write had returned: how far
	// behind the reader was, at least.
	Age time.Duration
	// At is when the read began (monotonic ns).
	At uint64
}

// maxStaleReads bounds the stale reads one span reports.
const maxStaleReads = 8

// checkRead records in o's span a stale read when the version c of an object read at time at
// is older than the newest traced write of the object that returned before then.
func (a *Assembler) checkRead(o *openSpan, c CallInfo, at uint64) {
	if c.UID == "" || c.ResourceVersion == "" {
		return
	}
	w, ok := a.latest.newerBefore(c.UID, c.ResourceVersion, at)
	if !ok {
		return
	}
	for _, r := range o.span.StaleReads {
		if r.UID == c.UID && r.ResourceVersion == c.ResourceVersion {
			return // one report per version read
		}
	}
	if len(o.span.StaleReads) < maxStaleReads {
		o.span.StaleReads = append(o.span.StaleReads, StaleRead{Namespace: c.Namespace, Name: c.Name, UID: c.UID,
			Resource: c.Resource, ResourceVersion: c.ResourceVersion, NewerVersion: w.resourceVersion,
			NewerWriter: w.controller, Age: time.Duration(at - w.end), At: at})
	}
}
