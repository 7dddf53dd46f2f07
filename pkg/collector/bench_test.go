package collector

import (
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// The agent's user-space cost per event, without a kernel: each ring-buffer record of a
// recorded-like stream goes through what Run does with it (decode: site lookup, strings,
// error type by itab; the probe's decoder; span.Assembler.Add). `make bench` reports these
// against the budget of DESIGN.md §6: at least 1 M events/s on one core.

const (
	benchPID      = 4242
	benchWorkers  = 16 // goroutines reconciling at once, interleaved in the stream
	itabErrString = 0x7f0000001000
	itabConfigMap = 0x7f0000002000
)

// benchSite indexes the site table of benchCollector.
const (
	siteReconcileEntry = iota
	siteReconcileReturn
	siteCacheGetEntry
	siteCacheGetReturn
	siteRequestEntry
	siteResponseEntry
	siteResponseReturn
	siteRequestReturn
)

func catalogProbe(b *testing.B, id, minVersion string) *probes.Probe {
	for _, p := range probes.Catalog() {
		if p.ID == id && p.MinVersion == minVersion {
			return p
		}
	}
	b.Fatalf("catalog has no probe %s (min version %q)", id, minVersion)
	return nil
}

// benchCollector is a Collector with a site table and one traced process, and no kernel.
func benchCollector(b *testing.B) *Collector {
	recon := catalogProbe(b, "controller-runtime/reconcile", "v0.23.0")
	get := catalogProbe(b, "controller-runtime/cache-get", "")
	req := catalogProbe(b, "client-go/request", "")
	resp := catalogProbe(b, "client-go/response", "")
	site := func(p *probes.Probe, kind probes.SiteKind) *probes.Site {
		return &probes.Site{Probe: p, Kind: kind}
	}
	c := &Collector{
		table: []*probes.Site{
			site(recon, probes.SiteEntry), site(recon, probes.SiteReturn),
			site(get, probes.SiteEntry), site(get, probes.SiteReturn),
			site(req, probes.SiteEntry),
			site(resp, probes.SiteEntry), site(resp, probes.SiteReturn),
			site(req, probes.SiteReturn),
		},
		procs: map[uint32]*process{benchPID: {pid: benchPID, names: map[uint64]string{
			itabErrString: "*errors.errorString",
			itabConfigMap: "*v1.ConfigMap",
		}}},
	}
	return c
}

func setStr(e *rbpf.TraceEvent, i int, s string) {
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&e.Str[i][0])), len(e.Str[i])), s)
	e.StrLen[i] = uint16(len(s))
}

// benchStream builds the records of `reconciles` reconciles spread over benchWorkers
// goroutines, interleaved as the workers would interleave them. withCalls adds, inside each
// reconcile, a cache read and an API PATCH with its status (8 records per reconcile instead
// of 2). One reconcile in 8 returns an error with its message. Times increase throughout.
func benchStream(reconciles int, withCalls bool) [][]byte {
	perWorker := make([][]rbpf.TraceEvent, benchWorkers)
	for i := range reconciles {
		w := i % benchWorkers
		goid := int64(100 + w)
		g := uint64(0xc000100000 + w*0x1000)
		ev := func(site uint32, kind uint8) rbpf.TraceEvent {
			return rbpf.TraceEvent{Kind: kind, Site: site, Pid: benchPID, Tid: benchPID + uint32(w), G: g, Goid: goid}
		}
		ns, name := "team-a-production", fmt.Sprintf("webapp-7d9f8c6b5-%05d", i%4096)
		entry := ev(siteReconcileEntry, eventEntry)
		entry.Flags = flagReconcileID
		setStr(&entry, 0, "webapp")
		setStr(&entry, 1, ns)
		setStr(&entry, 2, name)
		setStr(&entry, strExtra, fmt.Sprintf("%08x-1c2d-4e5f-8a9b-%012x", i, i))
		seq := []rbpf.TraceEvent{entry}
		if withCalls {
			get := ev(siteCacheGetEntry, eventEntry)
			get.Args[7] = itabConfigMap
			setStr(&get, 0, ns)
			setStr(&get, 1, name)
			getRet := ev(siteCacheGetReturn, 2)
			setStr(&getRet, 0, fmt.Sprintf("5b0e3c1a-9f7d-4c2b-a8e6-%012x", i))
			patch := ev(siteRequestEntry, eventEntry)
			for j, s := range []string{"PATCH", "webapps", ns, name, "status"} {
				setStr(&patch, j, s)
			}
			status := ev(siteResponseEntry, eventEntry)
			status.Vals[0] = 200
			statusRet := ev(siteResponseReturn, 2)
			patchRet := ev(siteRequestReturn, 2)
			seq = append(seq, get, getRet, patch, status, statusRet, patchRet)
		}
		ret := ev(siteReconcileReturn, 2)
		if i%8 == 3 {
			ret.Args[3], ret.Args[4] = itabErrString, 0xc000200000
			ret.Flags = flagErrorMsg
			setStr(&ret, strExtra, "update webapp team-a-production/"+name+": the object has been modified; please apply your changes to the latest version and try again")
		}
		seq = append(seq, ret)
		perWorker[w] = append(perWorker[w], seq...)
	}
	var out [][]byte
	var t uint64 = 1_000_000_000
	for more := true; more; {
		more = false
		for w := range perWorker {
			if len(perWorker[w]) == 0 {
				continue
			}
			more = true
			e := perWorker[w][0]
			perWorker[w] = perWorker[w][1:]
			t += 1500
			e.Ktime = t
			if e.Site != siteReconcileEntry {
				e.SpanStart = 1 // the kernel reports the open span's entry time; any non-zero value
			}
			rec := make([]byte, unsafe.Sizeof(e))
			*(*rbpf.TraceEvent)(unsafe.Pointer(&rec[0])) = e
			if e.StrLen == [6]uint16{} {
				rec = rec[:headSize] // as the kernel sends a record without strings: its head alone
			}
			out = append(out, rec)
		}
	}
	return out
}

// BenchmarkDecodeAssemble is the agent's per-event work: ring-buffer record in, span out.
func BenchmarkDecodeAssemble(b *testing.B) {
	for _, bc := range []struct {
		name      string
		withCalls bool
	}{{"reconcile-only", false}, {"with-calls", true}} {
		b.Run(bc.name, func(b *testing.B) {
			c := benchCollector(b)
			stream := benchStream(4096, bc.withCalls)
			spans := 0
			asm := span.NewAssembler(span.Options{}, func(span.Span) { spans++ })
			var raw probes.Raw
			b.ReportAllocs()
			n := 0
			cpu := startCPU(b)
			for b.Loop() {
				// What Collector.Run does with each record.
				site, ok := c.decode(stream[n%len(stream)], &raw)
				if !ok {
					b.Fatal("malformed record")
				}
				dec := site.Probe.DecodeEntry
				if site.Kind == probes.SiteReturn {
					dec = site.Probe.DecodeReturn
				}
				asm.Add(dec(&raw))
				n++
			}
			cpu.report(b, n)
			if n >= len(stream) && spans == 0 {
				b.Fatal("no span assembled")
			}
		})
	}
}

// BenchmarkDecodeEvent is DecodeEvent alone (the copy of the strings out of the record).
func BenchmarkDecodeEvent(b *testing.B) {
	stream := benchStream(1024, true)
	var raw probes.Raw
	b.ReportAllocs()
	n := 0
	cpu := startCPU(b)
	for b.Loop() {
		rec := stream[n%len(stream)]
		DecodeEvent(rec, &raw)
		n++
	}
	cpu.report(b, n)
}

// cpuClock measures the process's CPU time (this goroutine and the GC's), which, unlike
// ns/op, does not count the time other programs held the CPU: on a shared machine it is
// the honest "per core" figure.
type cpuClock struct{ start int64 }

func processCPU(b *testing.B) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return ts.Nano()
}

func startCPU(b *testing.B) cpuClock { return cpuClock{start: processCPU(b)} }

// report adds cpu-ns/event and events/cpu-s (events per second of one core's CPU time).
func (c cpuClock) report(b *testing.B, events int) {
	ns := float64(processCPU(b) - c.start)
	if events == 0 || ns <= 0 {
		return
	}
	b.ReportMetric(ns/float64(events), "cpu-ns/event")
	b.ReportMetric(float64(events)/(ns/1e9), "events/cpu-s")
}

// BenchmarkProcessWorker is the naming of a work-queue event's worker from its frames (every
// Done of a queue without a name): once per distinct frames, then a look-up ("cached"), against
// naming it at every event as decode did before ("each event").
func BenchmarkProcessWorker(b *testing.B) {
	frames := []string{
		"k8s.io/client-go/util/workqueue.(*Typed[go.shape.string]).Done",
		"k8s.io/kubernetes/pkg/controller/deployment.(*DeploymentController).processNextWorkItem",
		"k8s.io/kubernetes/pkg/controller/deployment.(*DeploymentController).worker",
		"k8s.io/apimachinery/pkg/util/wait.JitterUntilWithContext.func1",
	}
	p := &process{pid: benchPID, att: &Attachment{Plan: &probes.Plan{Binary: &symbols.Binary{}}}, funcs: map[uint32]string{}}
	for i, f := range frames {
		p.funcs[uint32(0x401000+i)] = f
	}
	vals := [2]uint64{0x401000 | 0x401001<<32, 0x401002 | 0x401003<<32}
	const want = "deployment.DeploymentController.processNextWorkItem"
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if w := p.worker(vals); w != want {
				b.Fatalf("worker %q, want %q", w, want)
			}
		}
	})
	b.Run("each event", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var fs [4]string
			for i := range fs {
				fs[i] = p.funcName(uint32(vals[i/2] >> (32 * (i % 2))))
			}
			if w := probes.Worker(fs[:]); w != want {
				b.Fatalf("worker %q, want %q", w, want)
			}
		}
	})
}
