package span

// The assembler's calls: an API or cache call's end paired with its start on the same
// goroutine, and the object it returned (the versions it made, no-op writes, fights).

import "time"

func (a *Assembler) callEnd(k goroutineKey, e Event) {
	o := a.spanOf(k, &e)
	if o == nil || len(o.calls[k]) == 0 {
		a.stats.OrphanCalls++
		return
	}
	stack := o.calls[k]
	c := stack[len(stack)-1]
	o.calls[k] = stack[:len(stack)-1]
	if len(o.calls[k]) == 0 {
		delete(o.calls, k)
	}
	info := c.info
	mergeCallInfo(&info, e.Call)
	if len(o.span.Calls) >= a.opts.MaxCalls {
		a.stats.CallsDropped++
		o.span.Incomplete = true
		return
	}
	var d time.Duration
	if e.Time > c.start {
		d = time.Duration(e.Time - c.start)
	}
	o.span.Calls = append(o.span.Calls, Call{CallInfo: info, Start: c.start, Duration: d, Depth: len(o.calls[k]), Goroutine: k.goid})
	if call := &o.span.Calls[len(o.span.Calls)-1]; call.Kind == CallAPI && call.IsWrite() && call.Status == 409 {
		call.ConflictWriter = a.latest.conflictWriter(&o.span, call)
	}
	if o.last == nil {
		o.last = map[goroutineKey]int{}
	}
	o.last[k] = len(o.span.Calls) - 1
	o.learnObject(info)
	if info.Kind == CallCacheGet {
		a.checkRead(o, info, c.start)
	}
}

// learnObject takes the reconciled object's UID from any call that names it, and its
// resourceVersion from the first read of it.
func (o *openSpan) learnObject(info CallInfo) {
	if info.UID == "" || info.Name != o.span.Name || info.Namespace != o.span.Namespace {
		return
	}
	if o.span.UID == "" {
		o.span.UID = info.UID
	}
	if o.span.ResourceVersion == "" && !info.IsWrite() && info.UID == o.span.UID {
		o.span.ResourceVersion = info.ResourceVersion
	}
}

// callObject gives the object an API call returned to the call that just ended on goroutine k.
func (a *Assembler) callObject(o *openSpan, k goroutineKey, obj CallInfo) {
	i, ok := o.last[k]
	if !ok || i >= len(o.span.Calls) {
		return
	}
	delete(o.last, k)
	c := &o.span.Calls[i]
	if c.Kind != CallAPI || c.UID != "" || (c.Name != "" && c.Name != obj.Name) {
		return
	}
	c.Namespace, c.Name, c.UID, c.ResourceVersion = obj.Namespace, obj.Name, obj.UID, obj.ResourceVersion
	o.learnObject(c.CallInfo)
	if !c.IsWrite() || c.Status >= 300 {
		return
	}
	end := c.Start + uint64(max(c.Duration, 0))
	// A write that returned the version the reconcile read changed nothing: it made no version.
	noop := c.UID == o.span.UID && c.ResourceVersion == o.span.ResourceVersion
	if c.Verb == "PUT" || c.Verb == "PATCH" {
		// An update or patch that returned a version already made (the one this reconcile
		// read of the object, or one a traced write made before) changed nothing either.
		uid, rv := readBefore(&o.span, c)
		_, made := a.versions.made[version{c.UID, c.ResourceVersion}]
		noop = noop || made || (uid == c.UID && rv == c.ResourceVersion)
		a.noopWrite(o, c, noop, end)
	}
	if noop {
		return
	}
	a.versions.remember(version{c.UID, c.ResourceVersion}, written{controller: o.span.Controller, pid: o.span.PID, end: end})
	a.latest.wrote(c.UID, c.ResourceVersion, o.span.Controller, end)
	if f := a.fightWrite(c, writer{pid: o.span.PID, controller: o.span.Controller}, end); f != nil {
		o.addFight(*f)
	}
}

// mergeCallInfo fills what the call's return learnt (status, UID) into what its entry knew.
func mergeCallInfo(dst *CallInfo, ret CallInfo) {
	if ret.Status != 0 {
		dst.Status = ret.Status
	}
	if ret.UID != "" {
		dst.UID = ret.UID
		dst.ResourceVersion = ret.ResourceVersion
	}
	if ret.Error != "" {
		dst.Error = ret.Error
	}
	if ret.Outcome != "" {
		dst.Outcome = ret.Outcome
	}
	if dst.Verb == "" {
		dst.Verb = ret.Verb
	}
	if dst.Resource == "" {
		dst.Resource = ret.Resource
	}
	if dst.Namespace == "" {
		dst.Namespace = ret.Namespace
	}
	if dst.Name == "" {
		dst.Name = ret.Name
	}
	if dst.Subresource == "" {
		dst.Subresource = ret.Subresource
	}
}
