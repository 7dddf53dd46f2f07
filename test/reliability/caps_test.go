package reliability

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/internal/testproc"
)

// Linux capability numbers (include/uapi/linux/capability.h) of the capabilities the
// DaemonSet may add.
var capNumbers = map[string]int{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "SYS_PTRACE": 19, "SYS_ADMIN": 21,
	"SYS_RESOURCE": 24, "PERFMON": 38, "BPF": 39,
}

// daemonSetCapabilities reads the capabilities deploy/daemonset.yaml adds back to the agent's
// container after dropping ALL, and its user ID.
func daemonSetCapabilities(t *testing.T) (add []string, uid int64) {
	t.Helper()
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "deploy", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type container struct {
		Name            string `json:"name"`
		SecurityContext struct {
			RunAsUser    *int64 `json:"runAsUser"`
			Capabilities struct {
				Add  []string `json:"add"`
				Drop []string `json:"drop"`
			} `json:"capabilities"`
		} `json:"securityContext"`
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var doc struct {
			Kind string `json:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []container `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("deploy/daemonset.yaml: %v", err)
		}
		if doc.Kind != "DaemonSet" || len(doc.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		c := doc.Spec.Template.Spec.Containers[0]
		sc := c.SecurityContext
		if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) || sc.RunAsUser == nil {
			t.Fatalf("deploy/daemonset.yaml: container %s drops %v, runs as %v: want drop ALL and a runAsUser", c.Name, sc.Capabilities.Drop, sc.RunAsUser)
		}
		return sc.Capabilities.Add, *sc.RunAsUser
	}
	t.Fatal("deploy/daemonset.yaml has no DaemonSet")
	return nil, 0
}

// capSet reads a capability set line (CapEff, CapBnd, ...) of a /proc/PID/status text.
func capSet(status []byte, line string) uint64 {
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, line+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 0
}

func capMask(names []string) uint64 {
	var m uint64
	for _, n := range names {
		m |= 1 << capNumbers[n]
	}
	return m
}

// setprivArgs runs a command with exactly caps: as root with a bounding set of caps (what a
// container runtime gives a uid-0 container that drops ALL and adds caps), or as a non-root
// uid with caps as ambient capabilities.
func setprivArgs(caps []string, uid int) []string {
	list := "-all"
	for _, c := range caps {
		list += ",+" + strings.ToLower(c)
	}
	args := []string{"--inh-caps", list, "--bounding-set", list}
	if uid != 0 {
		args = append([]string{"--reuid", strconv.Itoa(uid), "--regid", strconv.Itoa(uid), "--clear-groups", "--ambient-caps", list}, args...)
	}
	return append(args, "--")
}

// TestLeastPrivilege: the agent traces a controller that runs as another user (uid 65532)
// from a binary only that user may read (mode 0700), with exactly the capabilities
// deploy/daemonset.yaml adds back, as uid 0 with a bounded capability set (the DaemonSet's
// case) and as a non-root user holding them as ambient capabilities. With one of them taken
// away it fails, and its message names the missing capability; except CAP_SYS_RESOURCE,
// which kernels from 5.11 on (memory-cgroup accounting of eBPF memory) do not need.
func TestLeastPrivilege(t *testing.T) {
	bpftest.Require(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("setpriv (Debian package util-linux) is needed to run the agent with bounded capabilities: %v", err)
	}
	fakectl, agent := programs(t)
	caps, dsUID := daemonSetCapabilities(t)
	for _, c := range caps {
		if _, ok := capNumbers[c]; !ok {
			t.Fatalf("deploy/daemonset.yaml adds %s, which this test does not know", c)
		}
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	ours := capSet(status, "CapBnd")
	var unavailable []string
	for _, c := range caps {
		if ours&(1<<capNumbers[c]) == 0 {
			unavailable = append(unavailable, c)
		}
	}
	for _, c := range unavailable {
		if c != "SYS_RESOURCE" {
			t.Fatalf("this test process cannot grant CAP_%s (its bounding set lacks it): cannot test the DaemonSet's set", c)
		}
		t.Logf("this machine's bounding set lacks CAP_SYS_RESOURCE: every run below is without it")
	}

	// A world-traversable folder: the controller (uid 65532) runs its own 0700 binary from it.
	dir, err := os.MkdirTemp("", "reconscope-caps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const ctlUID, agentUID = 65532, 65534
	bin := filepath.Join(dir, "manager")
	for _, cp := range []struct {
		src, dst string
		mode     os.FileMode
		uid      int
	}{{fakectl, bin, 0o700, ctlUID}, {agent, filepath.Join(dir, "reconscope-agent"), 0o755, 0}} {
		b, err := os.ReadFile(cp.src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cp.dst, b, cp.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(cp.dst, cp.uid, cp.uid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(cp.dst, cp.mode); err != nil {
			t.Fatal(err)
		}
	}
	agent = filepath.Join(dir, "reconscope-agent")
	probe := agentProbe(t, bin)
	cmd := exec.Command(bin, "-n", "1000000000", "-interval", "5ms")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: ctlUID, Gid: ctlUID}}
	ctl := testproc.Start(t, "manager", cmd)

	without := func(drop string) []string {
		return slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return c == drop })
	}
	memcg := kernelAtLeast(t, 5, 11)
	type run struct {
		name    string
		caps    []string
		uid     int
		traces  bool
		mention string // the missing capability the error must name
	}
	runs := []run{
		{"daemonset-set-as-uid-" + strconv.FormatInt(dsUID, 10), caps, int(dsUID), true, ""},
		{"daemonset-set-as-non-root-ambient", caps, agentUID, true, ""},
	}
	for _, c := range caps {
		r := run{name: "without-" + c, caps: without(c), uid: int(dsUID), mention: "CAP_" + c}
		if c == "SYS_RESOURCE" && memcg {
			r.traces, r.mention = true, ""
		}
		runs = append(runs, r)
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			// setpriv cannot hand out what this process lacks itself.
			have := slices.DeleteFunc(slices.Clone(r.caps), func(c string) bool { return slices.Contains(unavailable, c) })
			args := setprivArgs(have, r.uid)
			// The set the agent gets: check it is exactly what the run means to give.
			st, err := exec.Command(setpriv, append(args, "cat", "/proc/self/status")...).Output()
			if err != nil {
				t.Fatalf("setpriv %v: %v", args, err)
			}
			eff, want := capSet(st, "CapEff"), capMask(r.caps)&ours
			if eff != want {
				t.Fatalf("agent would run with CapEff %#x, want %#x", eff, want)
			}
			a := testproc.Start(t, "agent", exec.Command(setpriv, append(args, agent, "trace", "--pid", strconv.Itoa(ctl.PID()), "--duration", "3s", "--output", "json", "--probe", probe)...))
			<-a.Done()
			stderr, _ := os.ReadFile(a.StderrPath())
			var spans int
			for _, s := range agentSpans(t, a) {
				if s.PID == ctl.PID() {
					spans++
				}
			}
			switch {
			case r.traces && (a.Wait() != nil || spans == 0):
				t.Errorf("with %v (uid %d): exit %v, %d spans; want it to trace:\n%s", r.caps, r.uid, a.Wait(), spans, stderr)
			case !r.traces && a.Wait() == nil:
				t.Errorf("with %v (uid %d): traced (%d spans); want a failure naming %s", r.caps, r.uid, spans, r.mention)
			case !r.traces && !bytes.Contains(stderr, []byte(r.mention)):
				t.Errorf("with %v (uid %d): the error does not name %s:\n%s", r.caps, r.uid, r.mention, stderr)
			}
			msg := fmt.Sprintf("%d spans", spans)
			if a.Wait() != nil {
				msg = firstError(stderr)
			}
			t.Logf("CapEff %#x, uid %d: exit %v: %s", eff, r.uid, a.Wait(), msg)
		})
	}
	if ctl.Exited() {
		t.Fatalf("the controller died: %v", ctl.Wait())
	}
}

// firstError returns the agent's error line.
func firstError(stderr []byte) string {
	for _, l := range strings.Split(string(stderr), "\n") {
		if strings.Contains(l, "level=ERROR") || strings.HasPrefix(l, "reconscope-agent trace:") {
			return l
		}
	}
	return strings.TrimSpace(string(stderr))
}

// kernelAtLeast reports whether the running kernel is at least major.minor.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", u.Release, err)
	}
	return ma > major || ma == major && mi >= minor
}
