package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/internal/testproc"
)

// nodeReadyTimeout bounds the wait for the node to register and report Ready.
const nodeReadyTimeout = 120 * time.Second

// SandboxImage is the pod sandbox ("pause") image every node imports and containerd uses:
// test/tools/pause, built by the test.
const SandboxImage = "reconscope.test/pause:test"

// cniBinDir is where Debian's containernetworking-plugins puts bridge, host-local and loopback.
const cniBinDir = "/usr/lib/cni"

// NodeOptions says what StartNode runs.
type NodeOptions struct {
	// Name is the node's name; "reconscope-node" when empty. Two nodes of one test bed need
	// two names.
	Name string
	// StaticPods are pod manifests (YAML) by file name, written to the kubelet's static pod
	// folder before it starts, as kubeadm does on a control-plane node.
	StaticPods map[string][]byte
	// Images are image tarballs (BuildImage) imported into containerd before kubelet starts.
	Images []string
}

// Node is a kubelet node of the test bed: containerd 2 (test/tools/build-containerd.sh) with
// Debian's runc and CNI plugins, and kubelet from the control plane folder, registered with the
// test bed's kube-apiserver. Its configuration files are test/tools/node/*.
type Node struct {
	// Name is the Node object's name.
	Name string
	// IP is the node's address (status.hostIP of its pods): the pod bridge's gateway address,
	// reachable from the host and from pods.
	IP string
	// PodCIDR is the range pod IPs come from.
	PodCIDR string
	// ManifestDir is the kubelet's static pod folder.
	ManifestDir string
	// PodLogsDir is the kubelet's pod log folder (NAMESPACE_POD_UID/CONTAINER/N.log).
	PodLogsDir string
	// CgroupRoot is the kubelet's cgroup root (cgroupfs driver): every pod's cgroup is under it.
	CgroupRoot string
	// Dir is the node's private folder: containerd's root and state (every file of its
	// containers, image layers and root filesystems, is under it), kubelet's root dir, pod logs.
	Dir string
	// Containerd and Kubelet are the node's daemons.
	Containerd, Kubelet *Process

	env       *Env
	dir       string
	socket    string
	ctr       string
	net       nodeNetwork
	cs        *kubernetes.Clientset
	first     bool // the test bed's first node: serves the kubernetes Service, takes unconstrained pods
	stopBind  context.CancelFunc
	bindDone  chan struct{}
	apiProxy  net.Listener
	proxyDone sync.WaitGroup
	stopper   *testproc.Stopper
	downOnce  sync.Once
	// cleanup tears the node down (once); a daemon restarted later registers it again, so that
	// it runs before the new process's own cleanup stops it (cleanups run last-in first-out).
	cleanup func()
}

// StartNode starts a node for env, which must have been started with Options.Node, and returns
// once the Node is Ready. Pods are bound by the test bed's scheduler (there is no
// kube-scheduler): a pod without a node name goes to the first node its node selector and
// required node affinity allow (a DaemonSet's pod to its node), and one that constrains neither
// to env's first node. A test bed may run several nodes, started one after the other, on one
// kernel like a kind cluster's: each has its own name, containerd (socket, root, state),
// kubelet folders, cgroup root, and pod network (a bridge and a /24 of its own); the first node
// serves the kubernetes Service for the pods of all (stop the others first: t's cleanups do).
// At t's cleanup the node's pods are deleted and torn down by kubelet, then kubelet and
// containerd stop; any container, shim, mount or cgroup left behind fails t and is removed.
func StartNode(t testing.TB, env *Env, opts NodeOptions) *Node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("testenv: a node needs root (containerd, runc, mounts, cgroups)")
	}
	if env.ServiceIP == "" {
		t.Fatalf("testenv: StartNode needs a control plane started with Options.Node")
	}
	if opts.Name == "" {
		opts.Name = "reconscope-node"
	}
	for _, f := range []string{filepath.Join(cniBinDir, "bridge"), filepath.Join(cniBinDir, "host-local"), filepath.Join(cniBinDir, "loopback"), "/usr/sbin/runc"} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("testenv: a node needs Debian's runc and containernetworking-plugins: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(env.BinDir, "kubelet")); err != nil {
		t.Fatalf("testenv: no kubelet in the control plane folder (test/tools/build-controlplane.sh builds it): %v", err)
	}
	ctrdDir, err := toolDir("build-containerd.sh", "containerd", "ctr", "containerd-shim-runc-v2")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	root, err := testkit.ModuleRoot()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	pauseTar := BuildImage(t, ImageSpec{Ref: SandboxImage, Files: []string{testkit.Build(t, "./test/tools/pause", "-ldflags=-s -w") + "=/pause:0755"}, Entrypoint: []string{"/pause"}})

	// A short private folder: unix socket paths must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "rscope-node-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	nn := nodeNetworkAt(env.netIndex)
	first := env.nodes.Add(1) == 1
	if !first {
		// A pod network of its own; the service range and the kubernetes Service stay the
		// first node's.
		if nn, err = pickNodeNetwork(); err != nil || nn.index == env.netIndex {
			t.Fatalf("testenv: node %s: %v (index %d)", opts.Name, err, nn.index)
		}
	}
	n := &Node{
		Name: opts.Name, IP: nn.gateway.String(), PodCIDR: nn.podCIDR.String(), Dir: dir,
		ManifestDir: filepath.Join(dir, "manifests"), PodLogsDir: filepath.Join(dir, "pod-logs"), CgroupRoot: fmt.Sprintf("/reconscope-node-%d", nn.index),
		env: env, first: first, dir: dir, socket: filepath.Join(dir, "containerd.sock"),
		ctr: filepath.Join(ctrdDir, "ctr"), net: nn,
	}
	// Cleanups run last-in first-out. This one covers a failed start (after the cleanups of
	// whatever did start); the one registered once the node is up drains it first, while
	// kubelet and containerd still run. Both run before the control plane stops.
	teardown := func() {
		if n.stopper != nil {
			testproc.RemoveStopper(n.stopper)
		}
		n.teardown(t.Errorf, t.Logf, true)
	}
	n.cleanup = teardown
	t.Cleanup(teardown)
	for _, sub := range []string{"manifests", "pod-logs", "volume-plugins", "cni/net.d", "cni/ipam", "kubelet", "runc"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	if n.cs, err = kubernetes.NewForConfig(env.Config); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := n.setUpNetwork(); err != nil {
		t.Fatalf("testenv: node network: %v", err)
	}
	if first {
		if err := n.serveAPI(); err != nil {
			t.Fatalf("testenv: serve the kubernetes Service: %v", err)
		}
	}
	if err := makeCgroup(n.CgroupRoot); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	kubeletPort, err := freePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	healthzPort, err := freePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	vars := map[string]any{
		"Dir": dir, "Socket": n.socket, "SandboxImage": SandboxImage, "CNIBinDir": cniBinDir,
		"Bridge": nn.bridge, "PodCIDR": nn.podCIDR.String(), "Gateway": nn.gateway.String(),
		"CgroupRoot": n.CgroupRoot, "Port": kubeletPort, "HealthzPort": healthzPort,
	}
	for src, dst := range map[string]string{
		"containerd.toml": "containerd.toml", "cni.conflist": "cni/net.d/10-reconscope.conflist", "kubelet.yaml": "kubelet.yaml",
	} {
		if err := renderFile(filepath.Join(root, "test", "tools", "node", src), filepath.Join(dir, dst), vars); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	for name, data := range opts.StaticPods {
		if err := os.WriteFile(filepath.Join(n.ManifestDir, name), data, 0o644); err != nil {
			t.Fatalf("testenv: write static pod %s: %v", name, err)
		}
	}

	start := time.Now()
	n.Containerd = StartProcess(t, "containerd", n.containerdCommand())
	if err := n.waitContainerd(30 * time.Second); err != nil {
		testproc.LogTail(t, "containerd stderr", n.Containerd.StderrPath())
		t.Fatalf("testenv: start containerd: %v", err)
	}
	for _, tar := range append([]string{pauseTar}, opts.Images...) {
		n.ImportImage(t, tar)
	}

	n.Kubelet = StartProcess(t, "kubelet", n.kubeletCommand())
	if err := n.waitReady(nodeReadyTimeout); err != nil {
		testproc.LogTail(t, "kubelet stderr", n.Kubelet.StderrPath())
		testproc.LogTail(t, "containerd stderr", n.Containerd.StderrPath())
		t.Fatalf("testenv: node %s: %v", n.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.stopBind, n.bindDone = cancel, make(chan struct{})
	go n.bindPods(ctx)
	// On SIGINT or SIGTERM (and before -timeout) the node goes down without draining, before
	// kubelet's and containerd's own stoppers run, then the test binary dies: no test to fail,
	// so what is left is said on stderr.
	stderrf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	n.stopper = testproc.AddStopper("node "+n.Name, func() { n.teardown(stderrf, stderrf, false) })
	t.Cleanup(teardown)
	t.Logf("testenv: node %s Ready in %s (containerd 2, kubelet, pods on %s via bridge %s)", n.Name,
		time.Since(start).Round(time.Millisecond), n.PodCIDR, nn.bridge)
	return n
}

// containerdCommand is the command of the node's containerd.
func (n *Node) containerdCommand() *exec.Cmd {
	dir := filepath.Dir(n.ctr)
	cmd := exec.Command(filepath.Join(dir, "containerd"), "--config", filepath.Join(n.dir, "containerd.toml"))
	// The shims containerd starts find their binary on PATH.
	cmd.Env = append(os.Environ(), "PATH="+dir+":/usr/sbin:/usr/bin:/sbin:/bin")
	return cmd
}

// kubeletCommand is the command of the node's kubelet.
func (n *Node) kubeletCommand() *exec.Cmd {
	return exec.Command(filepath.Join(n.env.BinDir, "kubelet"),
		"--config="+filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig="+n.env.Kubeconfig,
		"--root-dir="+filepath.Join(n.dir, "kubelet"),
		"--hostname-override="+n.Name,
		"--node-ip="+n.IP,
		"--v=1")
}

// renderFile renders the template file src with vars into dst.
func renderFile(src, dst string, vars map[string]any) error {
	text, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("read node configuration: %w", err)
	}
	tmpl, err := template.New(filepath.Base(src)).Option("missingkey=error").Parse(string(text))
	if err != nil {
		return fmt.Errorf("parse %s: %w", src, err)
	}
	var b bytes.Buffer
	if err := tmpl.Execute(&b, vars); err != nil {
		return fmt.Errorf("render %s: %w", src, err)
	}
	return os.WriteFile(dst, b.Bytes(), 0o644)
}

// serveAPI forwards the kubernetes Service (ClusterIP:443, what kubelet tells pods in
// KUBERNETES_SERVICE_HOST and _PORT) to kube-apiserver on loopback: the one Service kube-proxy
// would program on this node. TCP is passed through untouched, so pods see kube-apiserver's own
// certificate and authenticate with their own service account tokens.
func (n *Node) serveAPI() error {
	u, err := url.Parse(n.env.Config.Host)
	if err != nil {
		return fmt.Errorf("parse API server address %q: %w", n.env.Config.Host, err)
	}
	target := u.Host
	l, err := net.Listen("tcp", net.JoinHostPort(n.net.serviceIP.String(), "443"))
	if err != nil {
		return err
	}
	n.apiProxy = l
	n.proxyDone.Add(1)
	go func() {
		defer n.proxyDone.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					return
				}
				defer up.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return nil
}

// waitContainerd waits until containerd answers on its socket.
func (n *Node) waitContainerd(timeout time.Duration) error {
	var last error
	answers := testkit.Poll(timeout, func() bool {
		if n.Containerd.Exited() {
			last = fmt.Errorf("exited: %v", n.Containerd.Wait())
			return true
		}
		out, err := exec.Command(n.ctr, "--address", n.socket, "version").CombinedOutput()
		if err != nil {
			last = fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
			return false
		}
		last = nil
		return true
	})
	switch {
	case !answers:
		return fmt.Errorf("not answering after %s: %v", timeout, last)
	case last != nil:
		return last // exited
	}
	return nil
}

// waitReady waits for the Node object to say Ready.
func (n *Node) waitReady(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := "not registered"
	for {
		select {
		case <-n.Kubelet.Done():
			return fmt.Errorf("kubelet exited: %v", n.Kubelet.Wait())
		case <-ctx.Done():
			return fmt.Errorf("not Ready after %s: %s", timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
		node, err := n.cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			continue
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				last = fmt.Sprintf("Ready=%s: %s: %s", c.Status, c.Reason, c.Message)
			}
		}
	}
}

// bindPods is the test bed's scheduler for this node: it binds to it every pending pod that
// names no node, asks for the default scheduler and takes this node (takes).
func (n *Node) bindPods(ctx context.Context) {
	defer close(n.bindDone)
	for {
		pods, err := n.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", "").String()})
		node, nerr := n.cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil && nerr == nil {
			for _, p := range pods.Items {
				if p.DeletionTimestamp != nil || (p.Spec.SchedulerName != "" && p.Spec.SchedulerName != corev1.DefaultSchedulerName) || !n.takes(&p, node) {
					continue
				}
				_ = n.cs.CoreV1().Pods(p.Namespace).Bind(ctx, &corev1.Binding{
					ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID},
					Target:     corev1.ObjectReference{Kind: "Node", Name: n.Name},
				}, metav1.CreateOptions{})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// takes says whether the scheduler binds pod p to node: its node selector matches the node's
// labels and its required node affinity, when it has one, allows the node (by label or by
// metadata.name, as a DaemonSet's pods ask for theirs); a pod that sets neither goes to the test
// bed's first node, one that several nodes allow to the one that binds it first.
func (n *Node) takes(p *corev1.Pod, node *corev1.Node) bool {
	if !labels.SelectorFromSet(p.Spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return n.first || len(p.Spec.NodeSelector) > 0
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if nodeMatches(term.MatchExpressions, node.Labels) && nodeMatches(term.MatchFields, labels.Set{"metadata.name": node.Name}) {
			return true
		}
	}
	return false
}

// nodeMatches says whether every requirement of reqs (In, NotIn, Exists, DoesNotExist) holds
// for set; an operator it does not know (Gt, Lt) never does.
func nodeMatches(reqs []corev1.NodeSelectorRequirement, set labels.Set) bool {
	ops := map[corev1.NodeSelectorOperator]selection.Operator{
		corev1.NodeSelectorOpIn: selection.In, corev1.NodeSelectorOpNotIn: selection.NotIn,
		corev1.NodeSelectorOpExists: selection.Exists, corev1.NodeSelectorOpDoesNotExist: selection.DoesNotExist,
	}
	for _, r := range reqs {
		op, ok := ops[r.Operator]
		if !ok {
			return false
		}
		req, err := labels.NewRequirement(r.Key, op, r.Values)
		if err != nil || !req.Matches(set) {
			return false
		}
	}
	return true
}

// ImportImage imports an image tarball (OCI layout or docker save format) into the node's
// containerd, in the namespace kubelet's pods use, under the name the tarball gives it.
func (n *Node) ImportImage(t testing.TB, tarball string) {
	t.Helper()
	start := time.Now()
	out, err := exec.Command(n.ctr, "--address", n.socket, "--namespace", "k8s.io", "images", "import", "--all-platforms", tarball).CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: import image %s: %v: %s", tarball, err, out)
	}
	t.Logf("testenv: imported %s in %s: %s", filepath.Base(tarball), time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
}

// TagByDigest gives the node's image name (imported) a second name, REPOSITORY@sha256:…, as a
// pull by digest from a registry would: `ctr images tag NAME REPOSITORY@DIGEST`. Pods can then
// run it by digest. (`ctr images import --digests` names an OCI layout's own index.json by its
// digest, not the image's: not what a registry serves.)
func (n *Node) TagByDigest(t testing.TB, name, byDigest string) {
	t.Helper()
	out, err := exec.Command(n.ctr, "--address", n.socket, "--namespace", "k8s.io", "images", "tag", "--local", "--force", name, byDigest).CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: tag %s as %s: %v: %s", name, byDigest, err, out)
	}
	t.Logf("testenv: tagged %s as %s: %s", name, byDigest, strings.TrimSpace(string(out)))
}

// criClient connects to containerd's CRI service.
func (n *Node) criClient() (cri.RuntimeServiceClient, func(), error) {
	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return cri.NewRuntimeServiceClient(conn), func() { conn.Close() }, nil
}
