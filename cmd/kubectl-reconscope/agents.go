package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/reconscope/reconscope/internal/cli"
)

// Defaults of the flags that find the agents.
const (
	// DefaultSelector is the label of the agents' pods in deploy/ and the Helm chart.
	DefaultSelector = "app.kubernetes.io/name=reconscope-agent"
	// defaultMetricsPort is the agent's --metrics-addr port when its pod names no port
	// "metrics".
	defaultMetricsPort = 9464
)

// clusterFlags are the flags every command has: which cluster, which agents, how to reach them.
type clusterFlags struct {
	kubeconfig, context string
	agentNamespace      string
	selector            string
	via                 string
	token               string
	port                int
}

func addClusterFlags(fs *pflag.FlagSet) *clusterFlags {
	c := &clusterFlags{}
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, as kubectl)")
	fs.StringVar(&c.context, "context", "", "kubeconfig context (default: the current context)")
	fs.StringVar(&c.agentNamespace, "agent-namespace", "", "namespace of the agents' pods (default: every namespace)")
	fs.StringVar(&c.selector, "selector", DefaultSelector, "label selector of the agents' pods")
	fs.StringVar(&c.via, "via", "auto", "how to reach each agent: proxy (the API server's pod proxy), port-forward, or auto (port-forward to agents run with --metrics-secure, whose bearer-token check the pod proxy cannot pass, proxy to the others)")
	fs.StringVar(&c.token, "token", "", "bearer token shown to agents run with --metrics-secure (default: your kubeconfig user's token; a user who authenticates with a client certificate has none)")
	fs.IntVar(&c.port, "agent-port", 0, "the agents' metrics port (default: the pod's port named metrics, else 9464)")
	return c
}

// completeClusterFlags lets a shell complete the values of --via.
func completeClusterFlags(cmd *cobra.Command) {
	cli.Complete(cmd, "via", "auto", "proxy", "port-forward")
}

// source is one agent: get reads a path of its metrics port.
type source struct {
	name string // the agent's pod, and its node
	get  func(ctx context.Context, path string, query url.Values) (io.ReadCloser, error)
}

// agentPod is an agent's pod as the plugin reaches it.
type agentPod struct {
	namespace, name, node string
	port                  int
	secure                bool // run with --metrics-secure: HTTPS and a bearer token
}

// check says what is wrong with the flags, before any cluster is contacted.
func (c *clusterFlags) check() error {
	switch c.via {
	case "auto", "proxy", "port-forward":
		return nil
	}
	return fmt.Errorf("--via %q: want auto, proxy or port-forward", c.via)
}

// connect finds the agents and returns a source for each; stop ends the port-forwards.
func (c *clusterFlags) connect(ctx context.Context, stderr io.Writer) (sources []source, stop func(), err error) {
	if err := c.check(); err != nil {
		return nil, nil, err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.context}).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubectl-reconscope/" + version
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("make Kubernetes client: %w", err)
	}
	pods, err := cs.CoreV1().Pods(c.agentNamespace).List(ctx, metav1.ListOptions{LabelSelector: c.selector})
	if err != nil {
		return nil, nil, fmt.Errorf("list the agents' pods (%s): %w", c.selector, err)
	}
	agents := agentPods(pods.Items, c.port)
	if len(agents) == 0 {
		where := "any namespace"
		if c.agentNamespace != "" {
			where = "namespace " + c.agentNamespace
		}
		return nil, nil, fmt.Errorf("no running agent pod with labels %s in %s: is the DaemonSet deployed (kubectl apply -k deploy/, or the Helm chart)? Else give --selector and --agent-namespace", c.selector, where)
	}
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for _, a := range agents {
		name := a.name
		if a.node != "" {
			name += " (node " + a.node + ")"
		}
		if c.via == "proxy" || (c.via == "auto" && !a.secure) {
			sources = append(sources, proxySource(name, cs, a))
			continue
		}
		base, end, err := portForward(ctx, cfg, cs, a)
		if err != nil {
			fmt.Fprintf(stderr, "agent %s: %v\n", name, err)
			continue
		}
		stops = append(stops, end)
		hc, err := agentClient(cfg, c.token, a.secure)
		if err != nil {
			stop()
			return nil, nil, err
		}
		sources = append(sources, httpSource(name, base, hc))
	}
	if len(sources) == 0 {
		stop()
		return nil, nil, errors.New("no agent could be reached (above)")
	}
	return sources, stop, nil
}

// agentPods are the running pods of pods, with their metrics port (port when not 0) and
// whether they serve it securely, sorted by node.
func agentPods(pods []corev1.Pod, port int) []agentPod {
	var out []agentPod
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || len(p.Spec.Containers) == 0 {
			continue
		}
		a := agentPod{namespace: p.Namespace, name: p.Name, node: p.Spec.NodeName, port: port}
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == "metrics" && a.port == 0 {
					a.port = int(cp.ContainerPort)
				}
			}
			// As the agent reads it: the command line wins over the environment.
			for _, e := range c.Env {
				if e.Name == "RECONSCOPE_METRICS_SECURE" {
					if v, err := strconv.ParseBool(e.Value); err == nil {
						a.secure = v
					}
				}
			}
			for _, arg := range c.Args {
				if arg == "--metrics-secure" {
					a.secure = true
				} else if v, ok := strings.CutPrefix(arg, "--metrics-secure="); ok {
					if b, err := strconv.ParseBool(v); err == nil {
						a.secure = b
					}
				}
			}
		}
		if a.port == 0 {
			a.port = defaultMetricsPort
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].node+"/"+out[i].name < out[j].node+"/"+out[j].name })
	return out
}

// proxySource reads the agent through the API server's pod proxy
// (/api/v1/namespaces/NS/pods/[https:]POD:PORT/proxy/PATH): the caller needs get on
// pods/proxy. The API server does not pass the caller's token on to the pod.
func proxySource(name string, cs kubernetes.Interface, a agentPod) source {
	target := a.name + ":" + strconv.Itoa(a.port)
	if a.secure {
		target = "https:" + target
	}
	return source{name: name, get: func(ctx context.Context, path string, q url.Values) (io.ReadCloser, error) {
		req := cs.CoreV1().RESTClient().Get().Namespace(a.namespace).Resource("pods").Name(target).SubResource("proxy").Suffix(path)
		for k, vs := range q {
			for _, v := range vs {
				req = req.Param(k, v)
			}
		}
		body, err := req.Stream(ctx)
		if err != nil {
			return nil, fmt.Errorf("GET %s through the pod proxy: %w", path, err)
		}
		return body, nil
	}}
}

// httpSource reads the agent at base (a port-forward's local address) with hc.
func httpSource(name, base string, hc *http.Client) source {
	return source{name: name, get: func(ctx context.Context, path string, q url.Values) (io.ReadCloser, error) {
		u := base + path
		if len(q) > 0 {
			u += "?" + q.Encode()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %w", path, err)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			return nil, fmt.Errorf("GET %s: %s: %s%s", path, resp.Status, strings.TrimSpace(string(b)), authHint(resp.StatusCode, path))
		}
		return resp.Body, nil
	}}
}

// authHint tells the user what to do when a secured agent refused them.
func authHint(code int, path string) string {
	switch code {
	case http.StatusUnauthorized:
		return " (the agent checks a bearer token with the API server: your kubeconfig user has none, e.g. a client certificate; give --token, such as $(kubectl create token NAME))"
	case http.StatusForbidden:
		return fmt.Sprintf(" (your user needs get on the non-resource URL %s: bind the ClusterRole reconscope-agent-spans-reader, deploy/metrics-auth)", path)
	}
	return ""
}

// agentClient is the HTTP client of a port-forwarded agent: with secure, HTTPS and the bearer
// token (token, else the kubeconfig's: its token, token file or exec plugin). The agent's
// certificate is self-signed by default; the port-forward, which the API server authorized,
// already names the pod, so its certificate is not verified.
func agentClient(cfg *rest.Config, token string, secure bool) (*http.Client, error) {
	if !secure {
		return &http.Client{}, nil
	}
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // see above
	if token != "" {
		return &http.Client{Transport: bearer{token: token, next: rt}}, nil
	}
	// The kubeconfig user's bearer token, token file or exec plugin; not its client
	// certificate, which the agent's TLS does not ask for.
	auth := &rest.Config{BearerToken: cfg.BearerToken, BearerTokenFile: cfg.BearerTokenFile, ExecProvider: cfg.ExecProvider,
		AuthProvider: cfg.AuthProvider, AuthConfigPersister: cfg.AuthConfigPersister}
	wrapped, err := rest.HTTPWrappersForConfig(auth, rt)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig credentials: %w", err)
	}
	return &http.Client{Transport: wrapped}, nil
}

// bearer adds a bearer token to each request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// portForward forwards a local port to the agent's metrics port (the caller needs create on
// pods/portforward) and returns the base URL that reaches it.
func portForward(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, a agentPod) (string, func(), error) {
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", nil, fmt.Errorf("port-forward: %w", err)
	}
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(a.namespace).Name(a.name).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	stopCh, ready := make(chan struct{}), make(chan struct{})
	errOut := &lockedBuffer{}
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(a.port)}, stopCh, ready, io.Discard, errOut)
	if err != nil {
		return "", nil, fmt.Errorf("port-forward: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	var once sync.Once
	stop := func() { once.Do(func() { close(stopCh) }) }
	select {
	case <-ready:
	case err := <-done:
		return "", nil, fmt.Errorf("port-forward to %s/%s: %v %s", a.namespace, a.name, err, errOut.String())
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, fmt.Errorf("port-forward to %s/%s: not ready after 30 s", a.namespace, a.name)
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		stop()
		return "", nil, fmt.Errorf("port-forward to %s/%s: no local port: %v", a.namespace, a.name, err)
	}
	scheme := "http"
	if a.secure {
		scheme = "https"
	}
	return fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0].Local), stop, nil
}

// lockedBuffer collects a port-forward's error output.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
