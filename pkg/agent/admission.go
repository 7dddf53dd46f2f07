package agent

import (
	"time"

	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/proc"
	"github.com/reconscope/reconscope/pkg/tracer"
)

// Admission is the one decision on a process: whether it is traced, and what its spans carry
// of its pod and which of its controllers' spans are kept. The /proc scan (Loop) and the
// kernel's admission at exec (AdmitExec, tracer.Options.Admit) both ask it.
type Admission struct {
	// ProcRoot is where the host's /proc is mounted: AdmitExec reads the process there, and a
	// Loop scans it. Empty means /proc.
	ProcRoot string
	// Pods names a process's pod from its container (cgroup); nil: no pod metadata, spans
	// carry none (trace --exe).
	Pods *discovery.PodIndex
	// Filter is the include/exclude config (docs/daemonset.md); nil: every process, every
	// controller.
	Filter *discovery.Filter
	// Exe, when set, keeps only the processes of this executable, as stat identifies it
	// (trace --exe).
	Exe *proc.StatFileID
}

// Verdict is Admission.Decide's answer on a process.
type Verdict int

const (
	// NotSelected: not traced (another executable than the one traced, or the filter's rules
	// exclude it).
	NotSelected Verdict = iota
	// Trace: traced, with the metadata Decide returns.
	Trace
	// Elsewhere: p runs in a pod Pods does not hold: another node's, where several nodes share
	// one kernel as on kind (discovery.PodIndex.OtherNode). Such a process is left to its
	// node's agent; a Loop looks it up again, in case its pod turns out to be this node's.
	Elsewhere
)

// Decide says whether p is traced, and with what metadata: one look-up of its pod serves the
// three answers (Verdict).
func (a *Admission) Decide(p discovery.Process) (tracer.ProcessMeta, Verdict) {
	if a.Exe != nil && p.ExeID != *a.Exe {
		return tracer.ProcessMeta{}, NotSelected
	}
	target := a.target(p)
	if a.Pods != nil && target.Pod == nil && a.Pods.OtherNode(target.Process.Container) {
		return tracer.ProcessMeta{}, Elsewhere
	}
	if !a.Filter.Match(target) {
		return tracer.ProcessMeta{}, NotSelected
	}
	return a.meta(target), Trace
}

// ownPodWait bounds how long a process admitted at exec whose pod Pods does not hold waits for
// Pods to learn of it, before it is taken for another node's process.
const ownPodWait = 2 * time.Second

// AdmitExec decides on process pid, which the kernel admitted at its exec (the
// tracer.Options.Admit of run). A process gone already is kept unless rules must decide. A
// process Decide finds Elsewhere is given ownPodWait for Pods to learn of its pod (the kubelet
// and the pod index hear of it from the same watch), then taken for another node's.
func (a *Admission) AdmitExec(pid int) (tracer.ProcessMeta, bool) {
	p, err := discovery.ReadProcess(a.ProcRoot, pid)
	if err != nil {
		return tracer.ProcessMeta{}, a.Filter == nil
	}
	deadline := time.Now().Add(ownPodWait)
	for {
		meta, v := a.Decide(p)
		if v != Elsewhere || !time.Now().Before(deadline) {
			return meta, v == Trace
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// named returns the metadata of p, traced while its container was not known to Pods yet (the
// kubelet writes a container's ID into the pod status after the container starts), once Pods
// knows it: the pod decides the controllers' rules on it now too.
func (a *Admission) named(p discovery.Process) (tracer.ProcessMeta, bool) {
	if a.Pods == nil {
		return tracer.ProcessMeta{}, false
	}
	pod, ok := a.Pods.Lookup(p.Container.ID)
	if !ok {
		return tracer.ProcessMeta{}, false
	}
	return a.meta(discovery.Target{Process: p, Pod: &pod}), true
}

// unnamed says whether p's spans may name its pod later: p runs in a container Pods has not
// named yet (meta is what Decide gave).
func (a *Admission) unnamed(p discovery.Process, meta tracer.ProcessMeta) bool {
	return a.Pods != nil && p.Container.ID != "" && meta.Container == ""
}

// target is what the filter decides on for process p: the process and its pod, when known.
func (a *Admission) target(p discovery.Process) discovery.Target {
	target := discovery.Target{Process: p}
	if a.Pods == nil {
		return target
	}
	if pod, ok := a.Pods.Lookup(p.Container.ID); ok {
		target.Pod = &pod
	} else if pod, ok := a.Pods.LookupPod(p.Container.PodUID); ok {
		target.Pod = &pod
	}
	return target
}

// meta is what the spans of target carry, and the controllers of it the filter selects. Without
// Pods, spans carry no pod metadata.
func (a *Admission) meta(target discovery.Target) tracer.ProcessMeta {
	var m tracer.ProcessMeta
	if a.Pods != nil {
		m = processMeta(target.Pod, target.Process.Container)
	}
	if c := a.Filter.ControllersOf(target); !c.All() {
		m.Controllers = c
	}
	return m
}
