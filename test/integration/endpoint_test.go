package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/span"
	"github.com/reconscope/reconscope/test/testenv"
)

// TestEndpointController traces the stripped kube-controller-manager's Endpoints controller
// (probe sync/endpoint): creating a Service yields an endpoint span for that Service, whose
// API write made the Service's Endpoints object, as the API server has it.
func TestEndpointController(t *testing.T) {
	bpftest.Require(t)
	t.Parallel() // its own control plane, executables (copies) and tracer
	env := testenv.Start(t, testenv.Options{ControllerManager: []string{"endpoints-controller"}, StrippedControllerManager: true})
	tr, s, _ := testenv.Trace(t, "kube-controller-manager", env.ControllerManagerPID)
	defer tr.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()

	const ns = "endpoints"
	c, bg := env.Client, context.Background()
	if err := c.Create(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if err := c.Create(bg, svc); err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1019 the Endpoints controller, traced here, writes this API
	var ep corev1.Endpoints
	testkit.Eventually(t, "the Endpoints controller's span of Service web with its Endpoints write", 30*time.Second, func() bool {
		if err := c.Get(bg, client.ObjectKey{Namespace: ns, Name: "web"}, &ep); err != nil {
			return false
		}
		return endpointWrite(s.Snapshot(), ns, string(ep.UID)) != nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sp := endpointWrite(s.Snapshot(), ns, string(ep.UID))
	if sp.Result != span.ResultSuccess || sp.UID != "" && sp.UID != string(svc.UID) {
		t.Errorf("endpoint span of %s/%s: result %s, uid %s; want success, the Service's uid %s", sp.Namespace, sp.Name, sp.Result, sp.UID, svc.UID)
	}
}

// endpointWrite finds the endpoint span of Service ns/web with the API call that created the
// Endpoints object uid.
func endpointWrite(spans []span.Span, ns, uid string) *span.Span {
	for i := range spans {
		sp := &spans[i]
		if sp.Controller != "endpoint" || sp.Namespace != ns || sp.Name != "web" {
			continue
		}
		for _, call := range sp.Calls {
			if call.Kind == span.CallAPI && call.Resource == "endpoints" && call.IsWrite() && call.UID == uid {
				return sp
			}
		}
	}
	return nil
}
