//go:build e2e

package e2e

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/reconscope/reconscope/test/testenv"
)

// kubectlReconscope runs the kubectl plugin as a user does, with the test bed's kubeconfig,
// and returns its standard output.
func kubectlReconscope(t *testing.T, env *testenv.Env, plugin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(plugin, append(args, "--kubeconfig", env.Kubeconfig)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Errorf("kubectl reconscope %s: %v\nstderr: %s\nstdout: %s", strings.Join(args, " "), err, stderr.String(), out)
	}
	t.Logf("kubectl reconscope %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// checkKubectlPlugin: with the DaemonSet's agent running, `kubectl reconscope tail` shows the
// scripted objects' reconciles of the fixture's controller (through the API server's pod
// proxy: the manifest's agent serves plain HTTP), as JSON lines and as trace's tree, and
// `kubectl reconscope top` ranks the fixture's objects: "fail", the one reconciled most
// (twice in error, then a success), first, by rate and by errors.
//
// The node's agent traces every process of the machine: other tests' scripted controllers, in
// namespaces of the same name too, may add spans; the checks count the fixture pod's own
// (fixturePod: namespace/name, as spans name it).
func checkKubectlPlugin(t *testing.T, env *testenv.Env, plugin, fixturePod string, scripted map[string]bool) {
	t.Helper()
	out := kubectlReconscope(t, env, plugin, "tail", "--controller", fixtureController, "-n", ns, "--follow=false", "-o", "json")
	results := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var s struct{ Controller, Namespace, Name, Result, Pod string }
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Errorf("tail -o json: not a JSON line: %q", line)
			continue
		}
		if s.Controller != fixtureController || s.Namespace != ns {
			t.Errorf("tail --controller %s -n %s printed a span of %s on %s/%s", fixtureController, ns, s.Controller, s.Namespace, s.Name)
		}
		if s.Pod == fixturePod {
			results[s.Name] = append(results[s.Name], s.Result)
		}
	}
	for name := range scripted {
		if len(results[name]) == 0 {
			t.Errorf("tail --controller %s: no reconcile of %s/%s", fixtureController, ns, name)
		}
	}
	if f := results["fail"]; len(f) < 3 || strings.Count(strings.Join(f, ","), "error") != 2 || f[len(f)-1] != "success" {
		t.Errorf("tail: the reconciles of %s/fail are %q, want its 2 errors, then a success", ns, f)
	}

	tree := kubectlReconscope(t, env, plugin, "tail", "--controller", fixtureController, "--object", "fail", "--errors", "--follow=false")
	var lines []string // a line per reconcile; its calls are indented below it
	for _, l := range strings.Split(strings.TrimSpace(tree), "\n") {
		if l != "" && !strings.HasPrefix(l, " ") {
			lines = append(lines, l)
		}
	}
	if len(lines) < 2 {
		t.Errorf("tail --object fail --errors: %d lines, want its 2 errors at least:\n%s", len(lines), tree)
	}
	for _, l := range lines {
		if !strings.Contains(l, fixtureController) || !strings.Contains(l, ns+"/fail") || !strings.Contains(l, "error") {
			t.Errorf("tail tree line %q: want the controller, %s/fail and error", l, ns)
		}
	}

	// No check through a port-forward (--via port-forward): the test bed's API server cannot
	// reach the kubelet (it dials the node by its name, which no DNS resolves here).

	for _, by := range []string{"rate", "errors"} {
		// -n: the agent traces every scripted-controller on the machine, other tests' too
		top := kubectlReconscope(t, env, plugin, "top", "--controller", fixtureController, "-n", ns, "--sort", by, "--interval", "0")
		controllers, objects, _ := strings.Cut(top, "\nOBJECT")
		if !regexp.MustCompile(`(?m)^` + fixtureController + ` +` + ns + `/scripted +[1-9]`).MatchString(controllers) {
			t.Errorf("top --sort %s: no row of the controller %s of the workload %s/scripted:\n%s", by, fixtureController, ns, top)
		}
		rows := strings.Split(strings.TrimSpace(objects), "\n")
		if len(rows) < 2 || !strings.HasPrefix(rows[1], ns+"/fail ") {
			t.Errorf("top --sort %s: the first object is not %s/fail:\n%s", by, ns, top)
		}
	}
}

// checkKubectlPluginKCM: `kubectl reconscope tail --controller deployment`, as a newcomer asks
// for kube-controller-manager's deployment controller (a client-go controller of a static pod),
// shows its reconciles of the Deployment deployment of the test's namespace.
func checkKubectlPluginKCM(t *testing.T, env *testenv.Env, plugin, deployment string) {
	t.Helper()
	deps := kubectlReconscope(t, env, plugin, "tail", "--controller", "deployment", "-n", ns, "--follow=false", "-o", "json")
	var kcm []string
	for _, line := range strings.Split(strings.TrimSpace(deps), "\n") {
		var s struct{ Controller, Namespace, Name, Result, Pod string }
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Errorf("tail -o json: not a JSON line: %q", line)
			continue
		}
		if s.Controller != "deployment" || s.Namespace != ns {
			t.Errorf("tail --controller deployment -n %s printed a span of %s on %s/%s", ns, s.Controller, s.Namespace, s.Name)
		}
		if strings.HasPrefix(s.Pod, "kube-system/kube-controller-manager-") && s.Name == deployment {
			kcm = append(kcm, s.Result)
		}
	}
	if len(kcm) == 0 {
		t.Errorf("tail --controller deployment -n %s: no reconcile of the Deployment %s/%s by kube-controller-manager's static pod", ns, ns, deployment)
	}
}
