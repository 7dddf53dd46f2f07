package collector

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/symbols"
)

// process is one traced process: its binary's load bias and what it takes to name the
// errors its reconciles return.
type process struct {
	pid  uint32
	att  *Attachment
	bias uint64
	mem  *os.File // /proc/PID/mem, for itabs made at run time; nil when not readable

	mu    sync.Mutex
	names map[uint64]string // run-time itab address -> concrete type name
	keys  []rbpf.TraceErrKey
}

// errorMessageFields are the concrete error types whose message the kernel reads, and where.
var errorMessageFields = []struct {
	typeName  string // as %T prints it
	structTyp string
	field     string
}{
	{"*errors.errorString", "errors.errorString", "s"},
	{"*fmt.wrapError", "fmt.wrapError", "msg"},
	{"*fmt.wrapErrors", "fmt.wrapErrors", "msg"},
	{"*errors.StatusError", "k8s.io/apimachinery/pkg/api/errors.StatusError", "ErrStatus.Message"},
}

// Trace starts tracing process pid, an instance of the attachment's executable.
func (c *Collector) Trace(pid int, a *Attachment) error {
	bias, err := loadBias(pid, a.Plan.Binary)
	if err != nil {
		return fmt.Errorf("find load address of process %d: %w", pid, err)
	}
	p := &process{pid: uint32(pid), att: a, bias: bias, names: map[uint64]string{}}
	if f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid)); err == nil {
		p.mem = f
	}
	bin := a.Plan.Binary
	itabs, err := bin.Itabs()
	if err != nil {
		c.log.Warn("error types will be resolved from process memory only", "pid", pid, "err", err)
	}
	for addr, name := range itabs {
		p.names[addr+bias] = ShortTypeName(name)
	}
	for _, f := range errorMessageFields {
		off, err := bin.FieldOffset(f.structTyp, f.field)
		if err != nil {
			continue // the message of that type stays unread; its type is still named
		}
		for addr, name := range p.names {
			if name != f.typeName {
				continue
			}
			k := rbpf.TraceErrKey{Pid: uint32(pid), Itab: addr}
			if err := c.errs.Put(&k, &rbpf.TraceErrLayout{MsgOff: uint32(off.Value)}); err != nil {
				return fmt.Errorf("write error layout: %w", err)
			}
			p.keys = append(p.keys, k)
		}
	}
	c.mu.Lock()
	c.procs[uint32(pid)] = p
	c.mu.Unlock()
	if err := c.pids.Put(uint32(pid), uint32(1)); err != nil {
		c.Untrace(pid)
		return fmt.Errorf("add process %d to the kernel's filter: %w", pid, err)
	}
	return nil
}

// Untrace stops tracing process pid and removes its kernel state.
func (c *Collector) Untrace(pid int) error {
	_ = c.pids.Delete(uint32(pid))
	c.mu.Lock()
	p := c.procs[uint32(pid)]
	delete(c.procs, uint32(pid))
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	for _, k := range p.keys {
		_ = c.errs.Delete(&k)
	}
	// Goroutine state of the process.
	var k rbpf.TraceG_key
	var v rbpf.TraceG_state
	var stale []rbpf.TraceG_key
	it := c.gors.Iterate()
	for it.Next(&k, &v) {
		if k.Pid == uint32(pid) {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		_ = c.gors.Delete(&k)
	}
	if p.mem != nil {
		p.mem.Close()
	}
	return nil
}

// Traced returns the PIDs traced now.
func (c *Collector) Traced() []int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]int, 0, len(c.procs))
	for pid := range c.procs {
		out = append(out, int(pid))
	}
	return out
}

// errorType names the concrete type behind a run-time itab address.
func (p *process) errorType(itab uint64) string {
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
func loadBias(pid int, bin *symbols.Binary) (uint64, error) {
	if !bin.PIE {
		return 0, nil
	}
	f, err := elf.Open(bin.Path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var first *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off == 0 {
			first = p
			break
		}
	}
	if first == nil {
		return 0, errors.New("no PT_LOAD segment at file offset 0")
	}
	exe, err := os.Stat(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return 0, err
	}
	maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	defer maps.Close()
	ino := inode(exe)
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[2] != "00000000" {
			continue
		}
		if n, _ := strconv.ParseUint(fs[4], 10, 64); n != ino {
			continue
		}
		start, err := strconv.ParseUint(strings.SplitN(fs[0], "-", 2)[0], 16, 64)
		if err != nil {
			return 0, err
		}
		return start - (first.Vaddr &^ (first.Align - 1)), nil
	}
	return 0, fmt.Errorf("executable not found in /proc/%d/maps", pid)
}
