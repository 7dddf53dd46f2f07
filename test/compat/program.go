//go:build compat

package compat

import (
	"bytes"
	"text/template"
)

// controllerProgram is the small controller built against each controller-runtime release:
// one controller named "compat" reconciling the ConfigMaps labelled compat=yes. A ConfigMap's
// name says what its first reconcile returns (err-*: an error, conflict-*: a Conflict
// *errors.StatusError, after-*: RequeueAfter 50ms, anything else success); later reconciles
// of it succeed. Every reconcile appends one ground-truth JSON line (the fields of
// test/groundtruth.Record) to --ground-truth before it returns.
// The template's .Minor is controller-runtime's minor version: v0.15 configures metrics in
// the manager's options, later releases through metricsserver.Options.
var controllerProgram = template.Must(template.New("main.go").Parse(`package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
{{- if gt .Minor 15}}
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
{{- end}}
)

type record struct {
	Controller     string    ` + "`json:\"controller\"`" + `
	Namespace      string    ` + "`json:\"namespace\"`" + `
	Name           string    ` + "`json:\"name\"`" + `
	UID            string    ` + "`json:\"uid\"`" + `
	Attempt        int       ` + "`json:\"attempt\"`" + `
	Outcome        string    ` + "`json:\"outcome\"`" + `
	ErrorType      string    ` + "`json:\"error_type\"`" + `
	Error          string    ` + "`json:\"error\"`" + `
	RequeueAfterNS int64     ` + "`json:\"requeue_after_ns\"`" + `
	ReconcileID    string    ` + "`json:\"reconcile_id\"`" + `
	Start          time.Time ` + "`json:\"start\"`" + `
	End            time.Time ` + "`json:\"end\"`" + `
	Noop           bool      ` + "`json:\"noop\"`" + `
}

type reconciler struct {
	c        client.Client
	mu       sync.Mutex
	attempts map[string]int
	out      *os.File
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	rec := record{Controller: "compat", Namespace: req.Namespace, Name: req.Name, Start: time.Now(),
		ReconcileID: string(controller.ReconcileIDFromContext(ctx))}
	var cm corev1.ConfigMap
	if gerr := r.c.Get(ctx, req.NamespacedName, &cm); gerr == nil {
		rec.UID = string(cm.UID)
	}
	r.mu.Lock()
	r.attempts[req.String()]++
	rec.Attempt = r.attempts[req.String()]
	r.mu.Unlock()
	rec.Outcome = "success"
	if rec.Attempt == 1 {
		switch {
		case strings.HasPrefix(req.Name, "err-"):
			err = errors.New("compat: scripted failure of " + req.Name)
		case strings.HasPrefix(req.Name, "conflict-"):
			err = apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, req.Name, errors.New("compat: scripted conflict"))
		case strings.HasPrefix(req.Name, "after-"):
			res.RequeueAfter = 50 * time.Millisecond
			rec.Outcome = "requeue_after"
			rec.RequeueAfterNS = int64(res.RequeueAfter)
		}
	} else {
		rec.Noop = true
	}
	if err != nil {
		rec.Outcome = "error"
		rec.Error = err.Error()
		switch err.(type) {
		case *apierrors.StatusError:
			rec.ErrorType = "*errors.StatusError"
		default:
			rec.ErrorType = "*errors.errorString"
		}
	}
	rec.End = time.Now()
	line, _ := json.Marshal(rec)
	r.mu.Lock()
	r.out.Write(append(line, '\n'))
	r.mu.Unlock()
	return res, err
}

func main() {
	// A flag set of its own: controller-runtime registers --kubeconfig on the global one.
	fs := flag.NewFlagSet(os.Args[0], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the API server")
	truth := fs.String("ground-truth", "", "file to append one JSON line per reconcile to")
	fs.Parse(os.Args[1:])
	// A sink that drops everything (controller-runtime v0.15 crashes on logr.Discard's nil sink).
	ctrl.SetLogger(funcr.New(func(prefix, args string) {}, funcr.Options{}))
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		panic(err)
	}
	out, err := os.OpenFile(*truth, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
{{- if gt .Minor 15}}
		Metrics:                metricsserver.Options{BindAddress: "0"},
{{- else}}
		MetricsBindAddress:     "0",
{{- end}}
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		panic(err)
	}
	r := &reconciler{c: mgr.GetClient(), attempts: map[string]int{}, out: out}
	labelled := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()["compat"] == "yes" })
	if err := ctrl.NewControllerManagedBy(mgr).Named("compat").For(&corev1.ConfigMap{}).WithEventFilter(labelled).Complete(r); err != nil {
		panic(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := mgr.Start(ctx); err != nil {
		panic(err)
	}
}
`))

// renderProgram returns the controller program for controller-runtime minor version minor.
func renderProgram(minor int) ([]byte, error) {
	var b bytes.Buffer
	err := controllerProgram.Execute(&b, struct{ Minor int }{minor})
	return b.Bytes(), err
}
