package collector

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/proc"
)

// process is one traced process: its binary's load bias and what it takes to name the
// errors its reconciles return.
type process struct {
	pid  uint32
	att  *Attachment
	bias uint64
	mem  *os.File // /proc/PID/mem, for itabs made at run time; nil when not readable

	mu sync.Mutex
	// names: run-time itab and type addresses -> concrete type name, for those not among the
	// executable's static itabs (att.names, shared by its processes, looked up at the address
	// minus the load bias): itabs built at run time, type words.
	names map[uint64]string
	funcs map[uint32]string // code address in the ELF file -> its function's name, "" if none
	// workers: the frames' return addresses of a Done site's event (its values) -> the worker
	// they name, so that an event costs a map look-up, not the naming of its worker.
	workers map[[2]uint64]string

	excluded map[uint64]bool // keys in the kernel's excluded map (Collector.Exclude; c.mu)
	detail   map[uint64]bool // keys in the kernel's call_detail map (Collector.SetCallDetail; c.mu)
}

// Trace starts tracing process pid, an instance of the attachment's executable. Tracing a
// process already traced through the same attachment changes nothing.
func (c *Collector) Trace(pid int, a *Attachment) error {
	c.mu.RLock()
	old := c.procs[uint32(pid)]
	c.mu.RUnlock()
	if old != nil && old.att == a {
		return nil
	}
	if pid <= 0 || pid >= c.pids.limit() {
		return fmt.Errorf("trace process %d: no such PID (the kernel gives 1 to %d)", pid, c.pids.limit()-1)
	}
	p, err := c.newProcess(pid, a)
	if err != nil {
		return err
	}
	c.mu.Lock()
	old = c.procs[uint32(pid)]
	if old != nil && old.att == a { // traced meanwhile
		c.mu.Unlock()
		p.close()
		return nil
	}
	c.procs[uint32(pid)] = p
	if old != nil {
		c.forgetExcluded(old) // another executable now: its keys meant the old one's objects
		c.forgetDetail(old)
	}
	c.mu.Unlock()
	if old != nil {
		old.close()
	}
	c.pids.add(pid)
	return nil
}

// newProcess reads what decoding process pid's events takes.
func (c *Collector) newProcess(pid int, a *Attachment) (*process, error) {
	bias, err := loadBias(c.proc, pid, a)
	if err != nil {
		return nil, fmt.Errorf("find load address of process %d: %w", pid, err)
	}
	p := &process{pid: uint32(pid), att: a, bias: bias, names: map[uint64]string{}, funcs: map[uint32]string{}}
	if f, err := c.proc.OpenMem(pid); err == nil {
		p.mem = f
	}
	return p, nil
}

func (p *process) close() {
	if p.mem != nil {
		p.mem.Close()
	}
}

// Untrace stops tracing process pid and removes its kernel state: its place in the PID filter
// and the span state of its goroutines. It also removes a process the kernel admitted at exec
// that was never traced here.
func (c *Collector) Untrace(pid int) {
	c.pids.remove(pid)
	c.mu.Lock()
	p := c.procs[uint32(pid)]
	delete(c.procs, uint32(pid))
	if p != nil {
		c.forgetExcluded(p)
		c.forgetDetail(p)
	}
	c.mu.Unlock()
	stale, err := c.goroutineKeys(pid, false)
	if err != nil {
		// A walk aborted by concurrent changes: the keys found so far go now, the rest age
		// out of the LRU map.
		c.log.Warn("remove goroutine state of an untraced process", "pid", pid, "err", err)
	}
	for _, k := range stale {
		_ = c.gors.Delete(&k)
	}
	if p != nil {
		p.close()
	}
}

// adopt traces a process the kernel admitted at exec (it is in the PID filter) whose events
// arrive before anyone called Trace for it, so its error types are named from its first event.
func (c *Collector) adopt(pid uint32, a *Attachment) *process {
	if !c.pids.has(int(pid)) {
		return nil // untraced meanwhile
	}
	if err := c.Trace(int(pid), a); err != nil {
		c.adoptFailed.Add(1)
		return nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.procs[pid]
}

// errorType names the concrete type behind a run-time itab address.
func (p *process) errorType(itab uint64) string {
	if p.att != nil {
		if n, ok := p.att.names[itab-p.bias]; ok {
			return n
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.names[itab]; ok {
		return n
	}
	name := "unknown"
	if p.mem != nil {
		if n, err := p.att.Plan.Binary.ItabTypeName(p.mem, p.bias, itab); err == nil {
			name = ShortTypeName(n)
		}
	}
	p.names[itab] = name
	return name
}

// objectType names the dynamic type of an `any` from its run-time type word (an abi.Type's
// address in the process), as %T prints it; "" when it cannot be named. Names are cached
// with the error types' (a type word and an itab are never at one address).
func (p *process) objectType(typ uint64) string {
	if p.att == nil || p.att.Plan == nil || p.att.Plan.Binary == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.names[typ]; ok {
		return n
	}
	name := ""
	if n, err := p.att.Plan.Binary.TypeName(typ - p.bias); err == nil {
		name = ShortTypeName(n)
	}
	p.names[typ] = name
	return name
}

// maxFuncNames bounds a process's cache of function names by code address (the return
// addresses of work-queue workers: a handful per program).
const maxFuncNames = 4096

// worker names the worker function of a Done site's event from its frames' return addresses
// (probes.Frames: four 32-bit ELF addresses, two per value, innermost first).
func (p *process) worker(vals [2]uint64) string {
	p.mu.Lock()
	w, ok := p.workers[vals]
	p.mu.Unlock()
	if ok {
		return w
	}
	var frames [4]string
	for i := range frames {
		frames[i] = p.funcName(uint32(vals[i/2] >> (32 * (i % 2))))
	}
	w = probes.Worker(frames[:])
	p.mu.Lock()
	if p.workers == nil {
		p.workers = map[[2]uint64]string{}
	}
	if len(p.workers) < maxFuncNames {
		p.workers[vals] = w
	}
	p.mu.Unlock()
	return w
}

// funcName is the name of the function whose code holds addr, "" when none (0: no address).
func (p *process) funcName(addr uint32) string {
	if addr == 0 || p.att == nil || p.att.Plan == nil || p.att.Plan.Binary == nil {
		return "" // no address, or no binary to name it with (a process known by its PID alone)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n, ok := p.funcs[addr]; ok {
		return n
	}
	n, err := p.att.Plan.Binary.FunctionNameAt(uint64(addr))
	if err != nil {
		n = ""
	}
	if len(p.funcs) < maxFuncNames {
		p.funcs[addr] = n
	}
	return n
}

// ShortTypeName turns a type name with import paths ("*k8s.io/apimachinery/pkg/api/errors.StatusError")
// into the form %T prints ("*errors.StatusError").
func ShortTypeName(name string) string {
	var b strings.Builder
	start := 0
	for i := 0; i <= len(name); i++ {
		if i < len(name) && !strings.ContainsRune("*[](){}, ;", rune(name[i])) {
			continue
		}
		word := name[start:i]
		if j := strings.LastIndexByte(word, '/'); j >= 0 {
			word = word[j+1:]
		}
		b.WriteString(word)
		if i < len(name) {
			b.WriteByte(name[i])
		}
		start = i + 1
	}
	return b.String()
}

// loadBias is where the process mapped its executable minus where the ELF file asks to be:
// 0 for position-dependent executables, the randomized base for PIE ones.
func loadBias(pfs proc.FS, pid int, a *Attachment) (uint64, error) {
	if !a.Plan.Binary.PIE {
		return 0, nil
	}
	maps, err := pfs.Maps(pid)
	if err != nil {
		return 0, err
	}
	for _, m := range maps {
		// The mapping at offset 0 of the executable's file, identified as the kernel does (the
		// real file on overlayfs). maps shows the file as the process's user sees it: on
		// overlayfs the overlay's device, with the real file's inode number; the inode number
		// is what both share.
		if m.Offset == 0 && m.Inode == a.id.Ino {
			return uint64(m.StartAddr) - a.base, nil
		}
	}
	return 0, fmt.Errorf("executable not found in %s", pfs.Path(pid, "maps"))
}
