package scale

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// profiler takes a traced cycle's agent profiles (RECONSCOPE_BENCH_SCALE_PPROF): CPU profiles
// back to back while the cycle's steps run (merge them with `go tool pprof -proto DIR/NAME-cpu-*`),
// then, at the cycle's end, its heap profile and its memory maps (/proc/PID/smaps,
// smaps_rollup, status).
type profiler struct {
	addr   string // the agent's --pprof-addr
	prefix string // DIR/NAME
	stop   chan struct{}
	done   chan struct{}
}

// profileSlice is the length of each CPU profile.
const profileSlice = 10 * time.Second

// newProfiler picks a free loopback address for the agent's --pprof-addr.
func newProfiler(b *testing.B, dir, name string) *profiler {
	b.Helper()
	must(b, os.MkdirAll(dir, 0o755))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(b, err)
	addr := ln.Addr().String()
	must(b, ln.Close())
	return &profiler{addr: addr, prefix: filepath.Join(dir, name)}
}

// start takes CPU profiles until finish.
func (p *profiler) start(b *testing.B) {
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.addr, int(profileSlice.Seconds()))
			if err := p.save(url, fmt.Sprintf("%s-cpu-%03d.pprof", p.prefix, i)); err != nil {
				b.Logf("agent CPU profile: %v", err)
				return
			}
		}
	}()
}

// finish waits for the CPU profile under way and saves the heap profile and memory maps of
// the agent, pid.
func (p *profiler) finish(b *testing.B, pid int) {
	b.Helper()
	close(p.stop)
	<-p.done
	must(b, p.save("http://"+p.addr+"/debug/pprof/heap", p.prefix+"-heap.pprof"))
	for _, f := range []string{"smaps", "smaps_rollup", "status"} {
		raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), f))
		must(b, err)
		must(b, os.WriteFile(p.prefix+"-"+f+".txt", raw, 0o644))
	}
}

func (p *profiler) save(url, file string) error {
	hc := &http.Client{Timeout: profileSlice + 30*time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
