// Package kubeapi is the agent's client of the Kubernetes API: the three calls it makes and
// nothing else. It lists and watches pods (the pod index), and creates TokenReviews and
// SubjectAccessReviews (--metrics-secure).
//
// It stands in for client-go's kubernetes.Clientset, which links the typed client of every
// API group, their apply configurations and the OpenAPI models, and whose scheme package
// registers every group's types when the program starts: nearly half of the agent's
// executable, and pages and maps its resident memory would carry on every node for calls it
// never makes (cmd/agent's TestLinksNoClientset keeps it out).
//
// Client makes the same requests as the clientset's CoreV1().Pods(""),
// AuthenticationV1().TokenReviews() and AuthorizationV1().SubjectAccessReviews()
// (TestSameRequestsAsClientset compares them): one REST client per group version, sharing one
// HTTP client; protobuf unless the config names a content type; the config's user agent, QPS
// and burst (client-go's defaults where unset, each group version with its own rate limiter,
// as the clientset does when QPS is unset); a scheme holding only core/v1,
// authentication.k8s.io/v1 and authorization.k8s.io/v1.
package kubeapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// scheme holds the three group versions the agent reads and writes, and the unversioned
// meta/v1 options, as client-go's kubernetes/scheme does for every group.
var (
	scheme         = runtime.NewScheme()
	codecs         = serializer.NewCodecFactory(scheme)
	parameterCodec = runtime.NewParameterCodec(scheme)
)

func init() {
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(authnv1.AddToScheme(scheme))
	utilruntime.Must(authzv1.AddToScheme(scheme))
}

// Interface is the agent's calls to the API server: what Client makes, and what a test stands
// a clientset in for (package kubeapitest). The stages take the part they use:
// discovery.PodClient, metricsauth.Reviewer.
type Interface interface {
	ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	CreateTokenReview(ctx context.Context, review *authnv1.TokenReview) (*authnv1.TokenReview, error)
	CreateSubjectAccessReview(ctx context.Context, review *authzv1.SubjectAccessReview) (*authzv1.SubjectAccessReview, error)
}

// Client makes the agent's calls to the API server. Make one with NewForConfig.
type Client struct {
	core, authn, authz *rest.RESTClient
}

// NewForConfig returns a Client for cfg, as kubernetes.NewForConfig(cfg) makes a clientset.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	c := *cfg
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	httpClient, err := rest.HTTPClientFor(&c)
	if err != nil {
		return nil, err
	}
	if c.RateLimiter == nil && c.QPS > 0 {
		if c.Burst <= 0 {
			return nil, fmt.Errorf("burst is required to be greater than 0 when RateLimiter is not set and QPS is set to greater than 0")
		}
		c.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(c.QPS, c.Burst)
	}
	var x Client
	for _, g := range []struct {
		client  **rest.RESTClient
		gv      schema.GroupVersion
		apiPath string
	}{
		{&x.core, corev1.SchemeGroupVersion, "/api"},
		{&x.authn, authnv1.SchemeGroupVersion, "/apis"},
		{&x.authz, authzv1.SchemeGroupVersion, "/apis"},
	} {
		if *g.client, err = restClient(c, g.gv, g.apiPath, httpClient); err != nil {
			return nil, err
		}
	}
	return &x, nil
}

// restClient is the REST client of one group version, as its generated client's
// NewForConfigAndClient makes it.
func restClient(c rest.Config, gv schema.GroupVersion, apiPath string, h *http.Client) (*rest.RESTClient, error) {
	c.GroupVersion = &gv
	c.APIPath = apiPath
	// The generated clients' codecs: the scheme's, with CBOR when client-go's ClientsAllowCBOR
	// feature gate is on.
	c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(scheme, codecs).WithoutConversion()
	return rest.RESTClientForConfigAndClient(&c, h)
}

// ListPods lists the pods of every namespace that opts selects.
func (c *Client) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	list := &corev1.PodList{}
	err := c.core.Get().
		UseProtobufAsDefault().
		Resource("pods").
		VersionedParams(&opts, parameterCodec).
		Timeout(timeoutOf(opts)).
		Do(ctx).
		Into(list)
	return list, err
}

// WatchPods watches the pods of every namespace that opts selects.
func (c *Client) WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.core.Get().
		UseProtobufAsDefault().
		Resource("pods").
		VersionedParams(&opts, parameterCodec).
		Timeout(timeoutOf(opts)).
		Watch(ctx)
}

// timeoutOf is opts.TimeoutSeconds as a duration; 0 when unset.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// CreateTokenReview asks the API server who review's token is.
func (c *Client) CreateTokenReview(ctx context.Context, review *authnv1.TokenReview) (*authnv1.TokenReview, error) {
	return create(ctx, c.authn, "tokenreviews", review, &authnv1.TokenReview{})
}

// CreateSubjectAccessReview asks the API server whether review's user may do what it says.
func (c *Client) CreateSubjectAccessReview(ctx context.Context, review *authzv1.SubjectAccessReview) (*authzv1.SubjectAccessReview, error) {
	return create(ctx, c.authz, "subjectaccessreviews", review, &authzv1.SubjectAccessReview{})
}

// create posts obj to resource and decodes the answer into result.
func create[T runtime.Object](ctx context.Context, c *rest.RESTClient, resource string, obj, result T) (T, error) {
	err := c.Post().
		UseProtobufAsDefault().
		Resource(resource).
		VersionedParams(&metav1.CreateOptions{}, parameterCodec).
		Body(obj).
		Do(ctx).
		Into(result)
	return result, err
}
