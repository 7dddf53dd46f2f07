package collector

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	rbpf "github.com/reconscope/reconscope/bpf"
	"github.com/reconscope/reconscope/pkg/proc"
)

// Exec is one process's execve, as the sched_process_exec raw tracepoint saw it.
type Exec struct {
	// PID is the process (its tgid).
	PID int
	// Admitted says that the exec'd file is an attached executable whose new processes are
	// admitted (Attachment.AdmitExecs): the kernel traces the process from its first instruction.
	Admitted bool
	// Exe identifies the exec'd file as the kernel does (see Collector.FileID).
	Exe proc.KernelFileID
}

const execFlagAdmitted = uint32(rbpf.TraceExecFlagEXEC_F_ADMITTED)

// execPrograms are on_exec and identify: they read kernel structures through CO-RE (the
// kernel's BTF) and bpf_find_vma (Linux 5.17), so they are loaded apart, on first use: a kernel
// without them still traces, finding processes by scanning /proc.
type execPrograms struct {
	once     sync.Once
	coll     *ebpf.Collection
	err      error
	identify sync.Mutex // one identify run at a time: it answers in one map slot
}

func (c *Collector) loadExecPrograms() (*ebpf.Collection, error) {
	c.execProgs.once.Do(func() {
		spec := c.execSpec.Copy()
		progs := map[string]*ebpf.ProgramSpec{}
		for _, name := range []string{rbpf.TraceProgOnExec, rbpf.TraceProgIdentify} {
			if spec.Programs[name] == nil {
				c.execProgs.err = errors.New("exec notifications: not loaded (this kernel has no raw tracepoints for eBPF, Linux 4.17+)")
				return
			}
			progs[name] = spec.Programs[name]
		}
		spec.Programs = progs
		// The programs share their maps with the loaded collection.
		replace := map[string]*ebpf.Map{}
		for _, name := range []string{rbpf.TraceMapExecs, rbpf.TraceMapTracedExes, rbpf.TraceMapTracedPids, rbpf.TraceMapCounters, rbpf.TraceMapFileIds} {
			replace[name] = c.coll.Maps[name]
		}
		for name := range spec.Maps {
			if replace[name] == nil {
				delete(spec.Maps, name)
			}
		}
		spec.Variables = nil // these programs read none; they live in data sections not loaded here
		coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: replace})
		if err != nil {
			c.execProgs.err = fmt.Errorf("load the exec programs (they need the kernel's BTF and Linux 5.17): %w", permission(err))
			return
		}
		c.execProgs.coll = coll
	})
	return c.execProgs.coll, c.execProgs.err
}

// FileID returns the identity of the executable file name as the kernel's exec hook sees an
// exec'd file, and as uprobes attach to it: the device (the kernel's dev_t, MAJOR << 20 | MINOR)
// and inode of the file its code is mapped from. On overlayfs (every container) that is the
// real file in its layer, shared by every container of one image, while stat reports the
// overlay's device, different in each container. So the file is mapped here for a moment and
// the kernel asked what the mapping maps. Without the exec programs (an old kernel, no BTF), it
// falls back to what stat reports.
func (c *Collector) FileID(name string) (proc.KernelFileID, error) {
	f, err := os.Open(name)
	if err != nil {
		return proc.KernelFileID{}, fmt.Errorf("identify executable: %w", err)
	}
	defer f.Close()
	coll, lerr := c.loadExecPrograms()
	if lerr != nil {
		return statFileID(f)
	}
	m, err := mmapPage(f)
	if err != nil {
		return proc.KernelFileID{}, fmt.Errorf("identify executable %s: %w", name, err)
	}
	defer munmap(m)
	c.execProgs.identify.Lock()
	defer c.execProgs.identify.Unlock()
	// bpf_find_vma only try-locks this process's memory map: another thread mapping or unmapping
	// memory at that moment (the Go runtime, another identification) makes it fail. Try again.
	var ret uint32
	for attempt := 0; ; attempt++ {
		ret, err = coll.Programs[rbpf.TraceProgIdentify].Run(&ebpf.RunOptions{Context: []uint64{uint64(uintptr(unsafe.Pointer(&m[0])))}})
		if err != nil {
			return proc.KernelFileID{}, fmt.Errorf("identify executable %s: %w", name, err)
		}
		if ret == 0 || attempt == 50 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if ret != 0 {
		return proc.KernelFileID{}, fmt.Errorf("identify executable %s: the kernel found no mapping of it", name)
	}
	var id rbpf.TraceExeId
	if err := c.coll.Maps[rbpf.TraceMapFileIds].Lookup(uint32(0), &id); err != nil {
		return proc.KernelFileID{}, fmt.Errorf("identify executable %s: %w", name, err)
	}
	return proc.KernelFileID{Dev: id.Dev, Ino: id.Ino}, nil
}

// WatchExecs reports every execve on this host, from the raw tracepoint sched_process_exec
// (no tracefs, no kprobes needed), until ctx ends. Only while it runs are new processes of
// attached executables admitted at exec (AdmitExecs). Discovery uses the other notifications to
// look at a new program at once. The channel drops notifications while its reader is behind,
// except admitted ones, which it waits for: those the caller must know of.
func (c *Collector) WatchExecs(ctx context.Context) (<-chan Exec, error) {
	coll, err := c.loadExecPrograms()
	if err != nil {
		return nil, err
	}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exec", Program: coll.Programs[rbpf.TraceProgOnExec]})
	if err != nil {
		return nil, fmt.Errorf("attach raw tracepoint sched_process_exec: %w", permission(err))
	}
	rd, err := ringbuf.NewReader(c.coll.Maps[rbpf.TraceMapExecs])
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("open exec ring buffer: %w", err)
	}
	out := make(chan Exec, 256)
	stop := context.AfterFunc(ctx, func() { rd.Close() })
	go func() {
		defer close(out)
		defer stop()
		defer l.Close()
		var rec ringbuf.Record
		for {
			if err := rd.ReadInto(&rec); err != nil {
				if !errors.Is(err, os.ErrClosed) && !errors.Is(err, ringbuf.ErrClosed) {
					c.log.Warn("exec notifications stopped; discovery relies on its /proc scan", "err", err)
				}
				return
			}
			if len(rec.RawSample) < int(unsafe.Sizeof(rbpf.TraceExecEvent{})) {
				continue
			}
			e := (*rbpf.TraceExecEvent)(unsafe.Pointer(&rec.RawSample[0]))
			ex := Exec{PID: int(e.Pid), Admitted: e.Flags&execFlagAdmitted != 0, Exe: proc.KernelFileID{Dev: e.Dev, Ino: e.Ino}}
			if ex.Admitted {
				select {
				case out <- ex:
				case <-ctx.Done():
					return
				}
				continue
			}
			select {
			case out <- ex:
			default:
			}
		}
	}()
	return out, nil
}
