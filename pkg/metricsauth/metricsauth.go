// Package metricsauth guards the agent's metrics endpoint the way kubebuilder scaffolds it for
// operators (controller-runtime's pkg/metrics/filters.WithAuthenticationAndAuthorization):
// the endpoint serves TLS, each request's bearer token is authenticated with a TokenReview and
// the request is authorized with a SubjectAccessReview for the non-resource URL it asks for
// (verb get for GET /metrics). It needs only a [Reviewer] (no k8s.io/apiserver), and caches
// each token's decision briefly.
//
// The agent's identity needs create on tokenreviews (authentication.k8s.io) and on
// subjectaccessreviews (authorization.k8s.io); a reader needs
// nonResourceURLs ["/metrics"], verbs ["get"].
package metricsauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
)

// Defaults of Options.
const (
	// DefaultAllowTTL is how long an allowed token is trusted without asking again: the
	// TokenReview cache TTL of controller-runtime's filter (its SubjectAccessReview allow
	// cache keeps 5 minutes; one TTL for both is the shorter).
	DefaultAllowTTL = time.Minute
	// DefaultDenyTTL is how long a refused token (401 or 403) is refused without asking again.
	DefaultDenyTTL = 10 * time.Second
	// DefaultReviewTimeout bounds one TokenReview or SubjectAccessReview.
	DefaultReviewTimeout = 10 * time.Second
	// maxCached bounds the decisions kept; past it the cache starts over.
	maxCached = 4096
)

// Reviewer creates TokenReviews and SubjectAccessReviews: the agent's is package kubeapi's
// Client.
type Reviewer interface {
	CreateTokenReview(ctx context.Context, review *authnv1.TokenReview) (*authnv1.TokenReview, error)
	CreateSubjectAccessReview(ctx context.Context, review *authzv1.SubjectAccessReview) (*authzv1.SubjectAccessReview, error)
}

// Options configures New.
type Options struct {
	// Client creates the TokenReviews and SubjectAccessReviews (the agent's own identity).
	Client Reviewer
	// Open are paths served without authentication (the kubelet's probes send no token).
	Open []string
	// AllowTTL and DenyTTL bound how long a decision is reused. Zero: DefaultAllowTTL,
	// DefaultDenyTTL.
	AllowTTL, DenyTTL time.Duration
	// ReviewTimeout bounds each review. Zero: DefaultReviewTimeout.
	ReviewTimeout time.Duration
	// Logger reports failed reviews (an API server error, not a refusal). Nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock of the cache. Nil: time.Now.
	Now func() time.Time
}

// Filter authenticates and authorizes requests before they reach the handler it wraps.
type Filter struct {
	opts  Options
	mu    sync.Mutex
	cache map[cacheKey]decision
}

type cacheKey struct {
	token      [sha256.Size]byte
	verb, path string
}

type decision struct {
	status  int    // http.StatusOK, StatusUnauthorized or StatusForbidden
	user    string // the authenticated user, for the 403 message
	expires time.Time
}

// New returns a Filter that reviews tokens with opts.Client.
func New(opts Options) *Filter {
	if opts.AllowTTL == 0 {
		opts.AllowTTL = DefaultAllowTTL
	}
	if opts.DenyTTL == 0 {
		opts.DenyTTL = DefaultDenyTTL
	}
	if opts.ReviewTimeout == 0 {
		opts.ReviewTimeout = DefaultReviewTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Filter{opts: opts, cache: map[cacheKey]decision{}}
}

// Wrap returns next behind the filter: a request without a bearer token, or whose token the
// API server does not authenticate, gets 401; one whose user may not use its verb on its path
// gets 403; a review that fails (API server unreachable) gets 500, as controller-runtime's
// filter answers.
func (f *Filter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range f.opts.Open {
			if r.URL.Path == p {
				next.ServeHTTP(w, r)
				return
			}
		}
		token, ok := bearerToken(r)
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		d, err := f.decide(r.Context(), token, strings.ToLower(r.Method), r.URL.Path)
		if err != nil {
			f.opts.Logger.Warn("metrics request not reviewed", "path", r.URL.Path, "err", err)
			http.Error(w, "Authentication or authorization failed", http.StatusInternalServerError)
			return
		}
		switch d.status {
		case http.StatusOK:
			next.ServeHTTP(w, r)
		case http.StatusUnauthorized:
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
		default:
			http.Error(w, fmt.Sprintf("Authorization denied for user %s", d.user), http.StatusForbidden)
		}
	})
}

// bearerToken reads "Authorization: Bearer <token>".
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// decide returns the cached decision for token, verb and path, or reviews them.
func (f *Filter) decide(ctx context.Context, token, verb, path string) (decision, error) {
	key := cacheKey{token: sha256.Sum256([]byte(token)), verb: verb, path: path}
	now := f.opts.Now()
	f.mu.Lock()
	d, ok := f.cache[key]
	f.mu.Unlock()
	if ok && now.Before(d.expires) {
		return d, nil
	}
	d, err := f.review(ctx, token, verb, path)
	if err != nil {
		return d, err
	}
	ttl := f.opts.DenyTTL
	if d.status == http.StatusOK {
		ttl = f.opts.AllowTTL
	}
	d.expires = now.Add(ttl)
	f.mu.Lock()
	if len(f.cache) >= maxCached {
		for k, old := range f.cache {
			if !now.Before(old.expires) {
				delete(f.cache, k)
			}
		}
		if len(f.cache) >= maxCached {
			clear(f.cache)
		}
	}
	f.cache[key] = d
	f.mu.Unlock()
	return d, nil
}

// review asks the API server who token is (TokenReview) and whether that user may use verb
// on the non-resource URL path (SubjectAccessReview).
func (f *Filter) review(ctx context.Context, token, verb, path string) (decision, error) {
	ctx, cancel := context.WithTimeout(ctx, f.opts.ReviewTimeout)
	defer cancel()
	tr, err := f.opts.Client.CreateTokenReview(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}})
	if err != nil {
		return decision{}, fmt.Errorf("create TokenReview: %w (the agent needs create on tokenreviews.authentication.k8s.io)", err)
	}
	if !tr.Status.Authenticated {
		return decision{status: http.StatusUnauthorized}, nil
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := f.opts.Client.CreateSubjectAccessReview(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User:                  u.Username,
			UID:                   u.UID,
			Groups:                u.Groups,
			Extra:                 extra,
			NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	})
	if err != nil {
		return decision{}, fmt.Errorf("create SubjectAccessReview: %w (the agent needs create on subjectaccessreviews.authorization.k8s.io)", err)
	}
	if !sar.Status.Allowed || sar.Status.Denied {
		return decision{status: http.StatusForbidden, user: u.Username}, nil
	}
	return decision{status: http.StatusOK, user: u.Username}, nil
}
