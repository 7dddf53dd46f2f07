// Package kubeapitest lets tests give the agent's stages a client-go clientset (a fake one,
// most often) where they take the agent's narrow client of package kubeapi. The agent itself
// never imports it: it would link every API group's typed client again.
package kubeapitest

import (
	"context"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/watchlist"

	"github.com/reconscope/reconscope/pkg/kubeapi"
)

// Clientset makes the calls of a kubeapi.Client through a client-go clientset.
type Clientset struct {
	kubernetes.Interface
}

var _ kubeapi.Interface = Clientset{}

// ListPods lists the pods of every namespace that opts selects.
func (c Clientset) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	return c.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
}

// WatchPods watches the pods of every namespace that opts selects.
func (c Clientset) WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return c.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, opts)
}

// CreateTokenReview creates review.
func (c Clientset) CreateTokenReview(ctx context.Context, review *authnv1.TokenReview) (*authnv1.TokenReview, error) {
	return c.AuthenticationV1().TokenReviews().Create(ctx, review, metav1.CreateOptions{})
}

// CreateSubjectAccessReview creates review.
func (c Clientset) CreateSubjectAccessReview(ctx context.Context, review *authzv1.SubjectAccessReview) (*authzv1.SubjectAccessReview, error) {
	return c.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
}

// IsWatchListSemanticsUnSupported passes on the clientset's answer to client-go's informers:
// the fake clientset cannot stream a list as a watch, so an informer on it lists.
func (c Clientset) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(c.Interface)
}
