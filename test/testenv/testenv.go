// Package testenv is reconscope's Kubernetes test bed: a real control plane (etcd and
// kube-apiserver through controller-runtime's envtest, optionally kube-controller-manager)
// built from source by test/tools/build-controlplane.sh, plus helpers to build and run fixture
// programs against it.
//
// Everything listens on loopback only, on free ports. Everything a test starts is stopped at its
// cleanup — fixtures first, then kube-controller-manager, then kube-apiserver, then etcd — also
// when the test fails, when the test binary gets SIGINT or SIGTERM, and shortly before its
// -timeout expires; the cleanup then fails the test if any of those processes is still alive.
//
//	env := testenv.Start(t, testenv.Options{ControllerManager: []string{"replicaset", "deployment"}})
//	bin := testkit.Build(t, "./test/fixtures/scripted-controller")
//	ctl := testenv.StartProcess(t, "scripted", exec.Command(bin, "--kubeconfig", env.Kubeconfig))
//
// The first run builds the control plane (about 11 minutes on 2 cores): run
// test/tools/build-controlplane.sh first, or give go test a -timeout of 30m.
package testenv

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/internal/testproc"
)

// controllerManagerReadyTimeout bounds the wait for kube-controller-manager's /healthz.
const controllerManagerReadyTimeout = 60 * time.Second

// Options says what Start runs besides etcd and kube-apiserver.
type Options struct {
	// ControllerManager names the kube-controller-manager controllers to run (its --controllers
	// flag), e.g. {"replicaset", "deployment"}. Empty: no kube-controller-manager.
	ControllerManager []string
	// StrippedControllerManager runs kube-controller-manager-stripped, built with -ldflags=-s -w
	// like release builds (no symbol table, no DWARF), instead of the plain build.
	StrippedControllerManager bool
	// ControllerManagerFlags are added to kube-controller-manager's command line, e.g.
	// --kube-api-qps=300 for a benchmark that creates thousands of objects.
	ControllerManagerFlags []string
	// BeforeControllerManager, when set, is called with kube-controller-manager's binary right
	// before it starts: a test attaches its probes there to trace it from its exec.
	BeforeControllerManager func(path string)
	// Node prepares kube-apiserver for a kubelet (StartNode): the ServiceAccount admission
	// plugin on (envtest turns it off), so pods get their service account token and CA; a
	// service IP range of this test bed's own; a serving certificate that also names the
	// kubernetes Service's ClusterIP, where pods reach the API server.
	Node bool
}

// Env is a running control plane.
type Env struct {
	// Config reaches kube-apiserver as an admin (group system:masters).
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file holding Config, in t.TempDir; pass it to
	// fixtures with --kubeconfig.
	Kubeconfig string
	// Client is a controller-runtime client built from Config with client-go's scheme (all
	// built-in types). It talks to the API server directly; it has no cache.
	Client client.Client
	// BinDir is the folder of the control plane binaries (ControlPlaneDir); kubectl is there.
	BinDir string
	// ControllerManager is the running kube-controller-manager, nil when Options named no
	// controllers.
	ControllerManager *Process
	// ControllerManagerPID is ControllerManager's PID, 0 when it does not run.
	ControllerManagerPID int
	// ControllerManagerPath is the binary kube-controller-manager runs from, empty when it does
	// not run.
	ControllerManagerPath string
	// ControllerManagerURL is kube-controller-manager's secure address (https://127.0.0.1:PORT,
	// a self-signed certificate), empty when it does not run. /healthz answers without a token;
	// /metrics does too when ControllerManagerFlags allow its path
	// (--authorization-always-allow-paths).
	ControllerManagerURL string
	// CAFile is the PEM file of the CA that signed kube-apiserver's serving certificate (with
	// Options.Node; empty otherwise).
	CAFile string
	// ServiceIP is the ClusterIP of the kubernetes Service in namespace default, the first
	// address of the service range (with Options.Node; empty otherwise). StartNode serves it.
	ServiceIP string
	// netIndex picks this test bed's address ranges (service and pod networks, see node_host.go).
	netIndex int
	// nodes counts the nodes StartNode started: the first one serves the kubernetes Service.
	nodes atomic.Int32
}

// Start starts etcd and kube-apiserver with envtest and, when opts names controllers,
// kube-controller-manager, and returns once they serve. It fails t (t.Fatal) when something does
// not start. All of it is stopped at t's cleanup, after the processes the test started later with
// StartProcess; then every process started for t must be gone, or t fails. Start fixtures after
// Start, so they are stopped before the control plane.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	dir, err := ControlPlaneDir()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	testproc.InstallSignalHandler()
	testproc.ArmWatchdog(t)

	// Checked last, after everything below has been stopped (cleanups run last-in first-out).
	t.Cleanup(func() { testproc.ReportLeftovers(t, t, false) })

	logf.SetLogger(logr.Discard()) // envtest's own client logs nothing worth reading here
	te := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		ControlPlane: envtest.ControlPlane{
			APIServer:   &envtest.APIServer{Path: filepath.Join(dir, "kube-apiserver")},
			Etcd:        &envtest.Etcd{Path: filepath.Join(dir, "etcd")},
			KubectlPath: filepath.Join(dir, "kubectl"),
		},
	}
	var nodeNet nodeNetwork
	var caPEM []byte
	if opts.Node {
		if nodeNet, err = pickNodeNetwork(); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		certDir := t.TempDir()
		if caPEM, err = apiServerCerts(certDir, nodeNet.serviceIP); err != nil {
			t.Fatalf("testenv: write kube-apiserver certificates: %v", err)
		}
		api := te.ControlPlane.GetAPIServer()
		api.CertDir = certDir
		api.SecureServing.CA = caPEM
		api.Configure().
			Set("service-cluster-ip-range", nodeNet.serviceCIDR.String()).
			Disable("disable-admission-plugins")
	}
	stopControlPlane := testproc.AddStopper("kube-apiserver and etcd", func() { _ = te.Stop() })
	t.Cleanup(func() {
		// envtest stops kube-apiserver, waits for it, then stops etcd.
		began := time.Now()
		if err := te.Stop(); err != nil {
			if opts.Node && strings.Contains(err.Error(), "timeout waiting for process kube-apiserver to stop") {
				// After serving a node, kube-apiserver sometimes does not finish its graceful
				// shutdown (seen: 1 s in most runs, over a minute in some); envtest then kills
				// it and stops etcd, and the leftover check below still runs. Not a test failure.
				t.Logf("testenv: kube-apiserver did not stop within envtest's timeout after serving a node; it was killed")
			} else {
				t.Errorf("testenv: stop control plane: %v", err)
			}
		}
		t.Logf("testenv: control plane stopped in %s", time.Since(began).Round(time.Millisecond))
		testproc.RemoveStopper(stopControlPlane)
	})
	start := time.Now()
	if _, err := te.Start(); err != nil {
		trackControlPlane(t, te)
		t.Fatalf("testenv: start etcd and kube-apiserver from %s: %v", dir, err)
	}
	trackControlPlane(t, te)

	admin, err := te.AddUser(envtest.User{Name: "reconscope-admin", Groups: []string{"system:masters"}},
		&rest.Config{QPS: 1000, Burst: 2000})
	if err != nil {
		t.Fatalf("testenv: add admin user: %v", err)
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		t.Fatalf("testenv: write admin kubeconfig: %v", err)
	}
	env := &Env{Config: admin.Config(), Kubeconfig: filepath.Join(t.TempDir(), "kubeconfig"), BinDir: dir}
	if err := os.WriteFile(env.Kubeconfig, kubeconfig, 0o600); err != nil {
		t.Fatalf("testenv: write kubeconfig: %v", err)
	}
	if opts.Node {
		env.netIndex, env.ServiceIP = nodeNet.index, nodeNet.serviceIP.String()
		env.CAFile = filepath.Join(te.ControlPlane.APIServer.CertDir, "ca.crt")
	}
	if env.Client, err = client.New(env.Config, client.Options{}); err != nil {
		t.Fatalf("testenv: create client: %v", err)
	}
	t.Logf("testenv: etcd and kube-apiserver up in %s at %s", time.Since(start).Round(time.Millisecond), env.Config.Host)

	if len(opts.ControllerManager) > 0 {
		startControllerManager(t, env, opts)
	}
	return env
}

// trackControlPlane records envtest's etcd and kube-apiserver (children of the test binary) for
// the leftover checks: this test bed's own, told from those of tests running in parallel by the
// folder of their own each is started with (kube-apiserver's certificates, etcd's data).
func trackControlPlane(t testing.TB, te *envtest.Environment) {
	type binary struct{ name, dir string }
	want := map[string]binary{}
	for _, b := range []struct{ name, path, dir string }{
		{"kube-apiserver", te.ControlPlane.APIServer.Path, te.ControlPlane.APIServer.CertDir},
		{"etcd", te.ControlPlane.Etcd.Path, te.ControlPlane.Etcd.DataDir},
	} {
		path := b.path
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real
		}
		want[path] = binary{b.name, b.dir}
	}
	procs, err := testproc.AllProcs()
	if err != nil {
		t.Errorf("testenv: find control plane processes: %v", err)
		return
	}
	for _, s := range procs {
		if s.PPID != os.Getpid() || !s.Alive() {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(s.PID), "exe"))
		if b, ok := want[exe]; err == nil && ok && startedIn(s.PID, b.dir) {
			testproc.Track(t, b.name, s.PID)
		}
	}
}

// startedIn says whether process pid's command line names dir (any process, when dir is empty).
func startedIn(pid int, dir string) bool {
	if dir == "" {
		return true
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return err == nil && strings.Contains(string(cmdline), dir)
}

// startControllerManager runs kube-controller-manager with the admin kubeconfig and waits for its
// /healthz.
func startControllerManager(t testing.TB, env *Env, opts Options) {
	t.Helper()
	name := "kube-controller-manager"
	if opts.StrippedControllerManager {
		name += "-stripped"
	}
	// A copy of its own: another test bed's kube-controller-manager (tests run in parallel)
	// then runs another executable, which a tracer attached from the exec does not admit and
	// whose uprobes are not this one's.
	path := filepath.Join(t.TempDir(), name)
	if err := testkit.CopyFile(filepath.Join(env.BinDir, name), path); err != nil {
		t.Fatalf("testenv: copy %s: %v", name, err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	cmd := exec.Command(path,
		"--kubeconfig="+env.Kubeconfig,
		"--authentication-kubeconfig="+env.Kubeconfig,
		"--authorization-kubeconfig="+env.Kubeconfig,
		"--authentication-skip-lookup=true",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+t.TempDir(),
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--controllers="+strings.Join(opts.ControllerManager, ","),
	)
	cmd.Args = append(cmd.Args, opts.ControllerManagerFlags...)
	if opts.BeforeControllerManager != nil {
		opts.BeforeControllerManager(path)
	}
	start := time.Now()
	p := StartProcess(t, "kube-controller-manager", cmd)
	env.ControllerManager, env.ControllerManagerPID, env.ControllerManagerPath = p, p.PID(), path
	env.ControllerManagerURL = fmt.Sprintf("https://127.0.0.1:%d", port)

	healthz := env.ControllerManagerURL + "/healthz"
	if err := waitHealthy(p, healthz, controllerManagerReadyTimeout); err != nil {
		testproc.LogTail(t, "kube-controller-manager stderr", p.StderrPath())
		t.Fatalf("testenv: start %s: %v", name, err)
	}
	t.Logf("testenv: %s (pid %d, controllers %s) healthy in %s", name, p.PID(),
		strings.Join(opts.ControllerManager, ","), time.Since(start).Round(time.Millisecond))
}

// waitHealthy polls url until it answers 200, p exits, or timeout passes.
func waitHealthy(p *Process, url string, timeout time.Duration) error {
	hc := &http.Client{
		Timeout: 2 * time.Second,
		// kube-controller-manager serves a self-signed certificate on loopback.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // loopback, self-signed
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := "no answer"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-p.Done():
			return fmt.Errorf("exited before %s answered: %v", url, p.Wait())
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %s after %s", url, last, timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr returns a loopback address (127.0.0.1:port) whose port was free a moment ago, for
// a server the test configures by address.
func FreeAddr(t testing.TB) string {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}
