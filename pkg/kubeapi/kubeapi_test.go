package kubeapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/reconscope/reconscope/pkg/kubeapi"
	"github.com/reconscope/reconscope/pkg/kubeapi/kubeapitest"
)

// request is what the API server saw of one request.
type request struct {
	Method, URL                    string
	Accept, ContentType, UserAgent string
	Body                           string
	HasAuthorization               bool
}

// apiServer answers the agent's four calls with fixed JSON and records the requests.
type apiServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []request
}

func newAPIServer(t *testing.T) *apiServer {
	s := &apiServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.seen = append(s.seen, request{Method: r.Method, URL: r.URL.String(), Accept: r.Header.Get("Accept"),
			ContentType: r.Header.Get("Content-Type"), UserAgent: r.Header.Get("User-Agent"), Body: string(body),
			HasAuthorization: r.Header.Get("Authorization") != ""})
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Query().Get("fieldSelector") == "spec.nodeName=forbidden":
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"pods is forbidden: User \"agent\" cannot list resource \"pods\" in API group \"\" at the cluster scope","details":{"kind":"pods"}}`)
		case r.URL.Path == "/api/v1/pods" && r.URL.Query().Get("watch") == "true":
			_, _ = io.WriteString(w, `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"ns","uid":"u","resourceVersion":"6"},"spec":{"nodeName":"node-a"}}}`+"\n")
		case r.URL.Path == "/api/v1/pods":
			_, _ = io.WriteString(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[{"metadata":{"name":"p","namespace":"ns","uid":"u"},"spec":{"nodeName":"node-a"}}]}`)
		case r.URL.Path == "/apis/authentication.k8s.io/v1/tokenreviews":
			_, _ = io.WriteString(w, `{"kind":"TokenReview","apiVersion":"authentication.k8s.io/v1","spec":{"token":"t"},"status":{"authenticated":true,"user":{"username":"reader","groups":["g"]}}}`)
		case r.URL.Path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			_, _ = io.WriteString(w, `{"kind":"SubjectAccessReview","apiVersion":"authorization.k8s.io/v1","spec":{"user":"reader","nonResourceAttributes":{"path":"/metrics","verb":"get"}},"status":{"allowed":true}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"the server could not find the requested resource"}`)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// take returns the requests seen since the last take.
func (s *apiServer) take() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := s.seen
	s.seen = nil
	return seen
}

// TestSameRequestsAsClientset: each call of a kubeapi.Client sends the API server the request
// client-go's clientset sends for it (method, path, query, content type and Accept, user
// agent, body) and gives back what the clientset gives back, errors included.
func TestSameRequestsAsClientset(t *testing.T) {
	timeout := int64(7)
	for _, tt := range []struct {
		name string
		call func(context.Context, kubeapi.Interface) (any, error)
	}{
		{"list pods of a node", func(ctx context.Context, c kubeapi.Interface) (any, error) {
			return c.ListPods(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a", ResourceVersion: "0", Limit: 500})
		}},
		{"list refused", func(ctx context.Context, c kubeapi.Interface) (any, error) {
			return c.ListPods(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=forbidden"})
		}},
		{"watch pods of a node", func(ctx context.Context, c kubeapi.Interface) (any, error) {
			w, err := c.WatchPods(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a", ResourceVersion: "5",
				TimeoutSeconds: &timeout, AllowWatchBookmarks: true})
			if err != nil {
				return nil, err
			}
			var events []watch.Event
			for ev := range w.ResultChan() {
				events = append(events, ev)
			}
			return events, nil
		}},
		{"stream a list as a watch", func(ctx context.Context, c kubeapi.Interface) (any, error) {
			w, err := c.WatchPods(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a", SendInitialEvents: new(true),
				ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
			if err != nil {
				return nil, err
			}
			w.Stop()
			return nil, nil
		}},
		{"token review", func(ctx context.Context, c kubeapi.Interface) (any, error) {
			return c.CreateTokenReview(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: "t"}})
		}},
		{"subject access review", func(ctx context.Context, c kubeapi.Interface) (any, error) {
			return c.CreateSubjectAccessReview(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User: "reader", Groups: []string{"g"}, Extra: map[string]authzv1.ExtraValue{"k": {"v"}},
				NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}}})
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newAPIServer(t)
			cfg := &rest.Config{Host: srv.URL, BearerToken: "agent-token", UserAgent: "reconscope-agent/test"}
			clientset, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			narrow, err := kubeapi.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			wantResult, wantErr := tt.call(ctx, kubeapitest.Clientset{Interface: clientset})
			want := srv.take()
			gotResult, gotErr := tt.call(ctx, narrow)
			got := srv.take()
			if len(want) == 0 {
				t.Fatal("the clientset sent nothing")
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("requests:\n got %+v\nwant %+v", got, want)
			}
			if !reflect.DeepEqual(gotResult, wantResult) {
				t.Errorf("result:\n got %+v\nwant %+v", gotResult, wantResult)
			}
			if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
				t.Errorf("error: got %v, want %v", gotErr, wantErr)
			}
		})
	}
}

// TestDefaultUserAgent: without a user agent in the config, the requests carry client-go's
// default, as the clientset's do.
func TestDefaultUserAgent(t *testing.T) {
	srv := newAPIServer(t)
	c, err := kubeapi.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListPods(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := srv.take()
	if len(seen) != 1 || seen[0].UserAgent != rest.DefaultKubernetesUserAgent() || !strings.Contains(seen[0].Accept, "application/vnd.kubernetes.protobuf") {
		t.Errorf("requests %+v, want one with user agent %q accepting protobuf", seen, rest.DefaultKubernetesUserAgent())
	}
}

// TestNeedsBurstWithQPS: a QPS without a burst is refused, as by the clientset.
func TestNeedsBurstWithQPS(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1", QPS: 5}
	_, wantErr := kubernetes.NewForConfig(cfg)
	_, err := kubeapi.NewForConfig(cfg)
	if err == nil || wantErr == nil || err.Error() != wantErr.Error() {
		t.Errorf("err = %v, want the clientset's %v", err, wantErr)
	}
}
