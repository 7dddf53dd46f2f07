// Command kubeprog is a fixture for pkg/symbols tests: a small controller-runtime and
// client-go program whose DWARF is compared with the offsets table.
package main

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

type reconciler struct{}

func (reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return reconcile.Result{}, apierrors.NewNotFound(schema.GroupResource{Resource: "things"}, req.Name)
}

var sink []any

func main() {
	sink = append(sink, controller.New, &metav1.ObjectMeta{}, &rest.Request{}, &rest.Result{}, reconciler{})
	c, err := controller.NewUnmanaged("fixture", controller.Options{Reconciler: reconciler{}})
	if err != nil {
		panic(err)
	}
	// One reconcile, called directly (no manager, no cluster needed).
	_, err = c.Reconcile(context.Background(), reconcile.Request{})
	fmt.Println(len(sink), err)
}
