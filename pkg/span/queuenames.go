package span

import "maps"

// queueNames is the assembler's part that names work queues: the name each queue was made with
// (controller-runtime names a controller's queue after it), by process and queue. Its state is
// its own.
type queueNames struct {
	max   int // bound on each map (Options.MaxOpen)
	names map[queueKey]string
	// making is the name of the queue being made on a goroutine (QueueNamed, until its
	// QueueMade).
	making map[goroutineKey]string
}

type queueKey struct {
	pid uint32
	id  uint64
}

func newQueueNames(bound int) queueNames {
	return queueNames{max: bound, names: map[queueKey]string{}, making: map[goroutineKey]string{}}
}

// naming: goroutine k makes a queue named name.
func (n *queueNames) naming(k goroutineKey, name string) {
	if len(n.making) < n.max {
		n.making[k] = name
	}
}

// made: the queue goroutine k was making is queue id of process pid.
func (n *queueNames) made(k goroutineKey, pid uint32, id uint64) {
	name, ok := n.making[k]
	delete(n.making, k)
	if ok && name != "" && (len(n.names) < n.max || n.names[queueKey{pid, id}] != "") {
		n.names[queueKey{pid, id}] = name
	}
}

// of returns the name of queue id of process pid; empty when not known.
func (n *queueNames) of(pid uint32, id uint64) string { return n.names[queueKey{pid, id}] }

// processExited forgets process pid's queues.
func (n *queueNames) processExited(pid uint32) {
	maps.DeleteFunc(n.names, func(k queueKey, _ string) bool { return k.pid == pid })
	maps.DeleteFunc(n.making, func(k goroutineKey, _ string) bool { return k.pid == pid })
}
