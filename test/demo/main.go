// Command demo is `make demo`: a real controller on a local control plane, traced live.
//
// It starts etcd and kube-apiserver (through envtest), kube-controller-manager (stripped,
// like release builds), and the scripted fixture controller (controller-runtime), runs
// `reconscope-agent trace` on the controller, and plays a short story: objects that succeed,
// fail, requeue, panic, get fixed and get deleted, and a Deployment that is scaled. The agent's
// live tree is printed as it happens. Ctrl-C stops everything it started.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const scriptAnnotation = "scripted.reconscope.io/script"

// stopSignals end the demo and stop everything it started.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

func main() {
	agent := flag.String("agent", "bin/reconscope-agent", "the reconscope-agent binary")
	wait := flag.Bool("wait", true, "after the story, keep tracing until Ctrl-C")
	flag.Parse()
	// SIGHUP too: a closed terminal window or an ended multiplexer session must stop the
	// control plane as Ctrl-C does.
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()
	if err := run(ctx, *agent, *wait); err != nil {
		if ctx.Err() != nil { // stopped as asked (Ctrl-C): what the stop cut short is no failure
			fmt.Println("demo: stopped")
			return
		}
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		stop()
		os.Exit(1)
	}
}

func say(format string, args ...any) {
	fmt.Printf("\n\033[1m▶ "+format+"\033[0m\n", args...)
}

func run(ctx context.Context, agent string, wait bool) error {
	if os.Geteuid() != 0 {
		return errors.New("tracing needs root: run `sudo make demo`")
	}
	agent, err := filepath.Abs(agent)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "reconscope-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	say("building the control plane (cached after the first run: the first takes ~11 minutes)")
	dir, err := controlPlaneDir()
	if err != nil {
		return err
	}
	say("starting etcd and kube-apiserver on loopback")
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("start control plane: %w", err)
	}
	defer func() {
		_ = env.Stop()
		fmt.Println("stopped the control plane")
	}()
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		return fmt.Errorf("add admin user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return err
	}
	c, err := client.New(user.Config(), client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return err
	}

	var procs []*exec.Cmd
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			p := procs[i]
			_ = p.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = p.Process.Kill()
				<-done
			}
		}
	}()
	start := func(name string, cmd *exec.Cmd) error {
		if cmd.Stdout == nil {
			log, err := os.Create(filepath.Join(tmp, name+".log"))
			if err != nil {
				return err
			}
			cmd.Stdout, cmd.Stderr = log, log
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		procs = append(procs, cmd)
		return nil
	}

	say("starting kube-controller-manager (stripped, like release builds) with the replicaset and deployment controllers")
	if err := start("kube-controller-manager", exec.Command(filepath.Join(dir, "kube-controller-manager-stripped"),
		"--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
		"--authentication-skip-lookup=true", "--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false",
		"--controllers=replicaset,deployment", "--use-service-account-credentials=false")); err != nil {
		return err
	}

	say("building and starting the scripted controller (controller-runtime v0.25, 2 workers)")
	fixture := filepath.Join(tmp, "scripted-controller")
	build := exec.CommandContext(ctx, "go", "build", "-o", fixture, "./test/fixtures/scripted-controller")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build the fixture controller: %w", err)
	}
	ctl := exec.Command(fixture, "--kubeconfig", kubeconfig, "--max-concurrent-reconciles", "2")
	if err := start("scripted-controller", ctl); err != nil {
		return err
	}

	metricsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	kcm := procs[0].Process.Pid
	say("reconscope-agent trace --pid %d,%d --metrics-addr %s --detail calls\n  (no change to the traced programs: uprobes at the entry and at every RET of Reconcile, sync handlers and API calls)", ctl.Process.Pid, kcm, metricsAddr)
	tr := exec.Command(agent, "trace", "--pid", fmt.Sprintf("%d,%d", ctl.Process.Pid, kcm), "--metrics-addr", metricsAddr, "--detail", "calls")
	tr.Stdout = os.Stdout
	logR, logW, err := os.Pipe()
	if err != nil {
		return err
	}
	tr.Stderr = logW
	if err := start("agent", tr); err != nil {
		return err
	}
	logW.Close()
	attached := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(logR)
		once := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(os.Stderr, line)
			if !once && strings.Contains(line, "attached") {
				once = true
				close(attached)
			}
		}
	}()
	select {
	case <-attached:
	case <-time.After(30 * time.Second):
		return errors.New("the agent did not attach within 30s")
	case <-ctx.Done():
		return nil
	}

	story := []struct {
		text string
		do   func(context.Context) error
	}{
		{"create namespace demo and ConfigMap web (reconciles fine)", func(ctx context.Context) error {
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}); err != nil {
				return err
			}
			return createCM(ctx, c, "web", "get:configmap/settings;success")
		}},
		{"create ConfigMap slow (its reconcile sleeps 300ms)", func(ctx context.Context) error {
			return createCM(ctx, c, "slow", "times:1;sleep:300ms")
		}},
		{"create ConfigMap flaky (fails twice with a Conflict, then succeeds; watch the backoff)", func(ctx context.Context) error {
			return createCM(ctx, c, "flaky", "times:2;error-status")
		}},
		{"create ConfigMap poll (asks to be requeued after 200ms, three times)", func(ctx context.Context) error {
			return createCM(ctx, c, "poll", "times:3;requeue-after:200ms")
		}},
		{"create ConfigMap broken (its reconcile panics once; controller-runtime recovers)", func(ctx context.Context) error {
			return createCM(ctx, c, "broken", "times:1;panic")
		}},
		{"create Deployment web with 2 replicas (kube-controller-manager reconciles it)", func(ctx context.Context) error {
			return c.Create(ctx, deployment(2))
		}},
		{"scale Deployment web to 4", func(ctx context.Context) error {
			return c.Patch(ctx, deployment(4), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":4}}`)))
		}},
		{"break ConfigMap web: its script now returns a wrapped error", func(ctx context.Context) error {
			return setScript(ctx, c, "web", "times:2;error-wrapped")
		}},
		{"fix ConfigMap web", func(ctx context.Context) error {
			return setScript(ctx, c, "web", "success")
		}},
		{"delete ConfigMap slow (a reconcile of an object that is gone)", func(ctx context.Context) error {
			return c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "slow"}})
		}},
	}
	for _, step := range story {
		say("%s", step.text)
		if err := step.do(ctx); err != nil {
			return fmt.Errorf("%s: %w", step.text, err)
		}
		select {
		case <-time.After(1500 * time.Millisecond):
		case <-ctx.Done():
			return nil
		}
	}
	say("that was the story; Prometheus metrics are at http://%s/metrics, for example:", metricsAddr)
	printMetrics(metricsAddr, "reconscope_reconcile_total")
	fmt.Printf(`
  JSON lines instead of the tree:   %s trace --pid %d --output json
  spans to an OpenTelemetry collector: OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 %s trace --pid %d
  inspect the controller binary:    %s inspect --pid %d
`, agent, ctl.Process.Pid, agent, ctl.Process.Pid, agent, ctl.Process.Pid)
	if wait {
		say("still tracing; press Ctrl-C to stop everything")
		<-ctx.Done()
	}
	_ = tr.Process.Signal(os.Interrupt)
	_ = tr.Wait()
	procs = procs[:len(procs)-1]
	return nil
}

// freeAddr returns a free loopback address.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// labelPair is one name="value" pair of an exposition line (Prometheus label names:
// [a-zA-Z_][a-zA-Z0-9_]*, values with backslash escapes).
var labelPair = regexp.MustCompile(`[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"`)

// dropEmptyLabels removes the labels with an empty value from one exposition line: an empty
// label is no label.
func dropEmptyLabels(line string) string {
	open := strings.IndexByte(line, '{')
	end := strings.LastIndexByte(line, '}')
	if open < 0 || end < open {
		return line
	}
	var kept []string
	for _, pair := range labelPair.FindAllString(line[open+1:end], -1) {
		if !strings.HasSuffix(pair, `=""`) {
			kept = append(kept, pair)
		}
	}
	if len(kept) == 0 {
		return line[:open] + line[end+1:]
	}
	return line[:open+1] + strings.Join(kept, ",") + line[end:]
}

// printMetrics prints the lines of one metric family from the agent's /metrics.
func printMetrics(addr, family string) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		fmt.Printf("  (metrics not reachable: %v)\n", err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), family+"{") {
			fmt.Println("  " + dropEmptyLabels(sc.Text()))
		}
	}
}

func createCM(ctx context.Context, c client.Client, name, script string) error {
	return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name,
		Annotations: map[string]string{scriptAnnotation: script}}})
}

func setScript(ctx context.Context, c client.Client, name, script string) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, scriptAnnotation, script)
	return c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name}},
		client.RawPatch(types.MergePatchType, []byte(patch)))
}

func deployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}
}

// controlPlaneDir runs the test bed's build script (a no-op when cached) and returns the folder
// it prints last.
func controlPlaneDir() (string, error) {
	cmd := exec.Command("test/tools/build-controlplane.sh")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("build the control plane: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}
