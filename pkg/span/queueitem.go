package span

// A work-queue item's span: the handler that runs inside it (enrich), and its Done, which
// names it (queueEnd).

// enrich makes the work-queue item o the span of the handler whose entry e is, which runs
// inside it: the handler's object, reconcile ID and times are the span's, and its result when
// it returns; its controller too, unless the queue's name is known (queueEnd). One span, not
// two. Its queue wait is known at its Done, which names its queue.
func (a *Assembler) enrich(o *openSpan, e Event) {
	o.handler = true
	o.span.Controller, o.span.Namespace, o.span.Name, o.span.ReconcileID = e.Controller, e.Namespace, e.Name, e.ReconcileID
	o.span.Start = e.Time
	o.span.Incomplete = o.span.Incomplete || e.Incomplete
}

// queueEnd completes a work-queue item's span at its Done (e): the queue's name is its
// controller, the item its object, its queue wait that of the adds to its queue, and its
// result what the worker did with it, unless a handler ran inside it, whose fields are the
// span's, and whose return is its result when it failed or a worker did nothing more with the
// item: a handler that returned nil and whose worker requeued the item (kube-controller-
// manager's deployment and cronjob controllers add their item again after a delay from inside
// the handler) is the worker's requeue, as at detail reconcile, where no handler is seen.
func (a *Assembler) queueEnd(o *openSpan, e Event) Event {
	s := &o.span
	switch name := a.names.of(e.PID, e.QueueID); {
	case name != "":
		s.Controller = name // as the queue's workqueue_* metrics name it
	case o.handler: // the handler named it
	case e.Worker != "":
		s.Controller = e.Worker
	default:
		s.Controller = UnnamedQueue
	}
	if !o.handler {
		s.Namespace, s.Name, s.ItemType = e.Namespace, e.Name, e.ItemType
	}
	if s.Name != "" {
		a.queues.serve(o, objectKey{pid: e.PID, namespace: s.Namespace, name: s.Name}, e.QueueID)
	}
	if o.handler {
		if o.handlerEnd == nil {
			e.Incomplete = true // the handler's return was not seen
			return e
		}
		end := *o.handlerEnd
		if end.Result == ResultSuccess {
			o.itemResult(&end)
		}
		return end
	}
	e.Result = ResultSuccess
	o.itemResult(&e)
	return e
}

// itemResult sets e's result from what the worker did with the item o before its Done: a
// retry (AddRateLimited) is an error, an add after a delay a requeue after it, an add a
// requeue; e's result stays when it did none of these.
func (o *openSpan) itemResult(e *Event) {
	switch {
	case o.retry:
		e.Result = ResultError
	case o.requeued && o.requeueAfter > 0:
		e.Result, e.RequeueAfter = ResultRequeueAfter, o.requeueAfter
	case o.requeued && o.requeueAfter == 0:
		e.Result = ResultRequeue
	case o.requeued:
		e.Result, e.Incomplete = ResultRequeueAfter, true // a delay not read
	}
}

// UnnamedQueue is the controller of a work-queue item whose queue's name is not known (a queue
// made without a Name, or before the process was traced) when the function that processes it
// (Event.Worker) is not known either.
const UnnamedQueue = "workqueue"
