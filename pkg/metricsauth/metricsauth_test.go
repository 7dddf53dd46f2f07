package metricsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/reconscope/reconscope/pkg/kubeapi/kubeapitest"
)

// fakeReviews answers TokenReviews (token "good" and "other" authenticate) and
// SubjectAccessReviews (user "reader" may get /metrics), counting each.
func fakeReviews() (Reviewer, func() (int, int)) {
	cs := fake.NewClientset()
	var mu sync.Mutex
	var tokens, sars int
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		mu.Lock()
		tokens++
		mu.Unlock()
		switch tr.Spec.Token {
		case "good":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "reader"}}
		case "other":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "other"}}
		}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		mu.Lock()
		sars++
		mu.Unlock()
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "reader" && na != nil && na.Path == "/metrics" && na.Verb == "get"
		return true, sar, nil
	})
	return kubeapitest.Clientset{Interface: cs}, func() (int, int) { mu.Lock(); defer mu.Unlock(); return tokens, sars }
}

// TestFilterCaches: each token's decision is reviewed once and reused until its TTL passes
// (allowed and denied apart); open paths need no token.
func TestFilterCaches(t *testing.T) {
	cs, counts := fakeReviews()
	now := time.Unix(1000, 0)
	f := New(Options{Client: cs, Open: []string{"/healthz"}, AllowTTL: time.Minute, DenyTTL: 10 * time.Second, Now: func() time.Time { return now }})
	srv := httptest.NewServer(f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) })))
	defer srv.Close()
	get := func(path, token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tt := range []struct {
		path, token        string
		want               int
		advance            time.Duration
		wantTokens, wantSA int // reviews made so far
	}{
		{"/healthz", "", 200, 0, 0, 0},
		{"/metrics", "", 401, 0, 0, 0},
		{"/metrics", "good", 200, 0, 1, 1},
		{"/metrics", "good", 200, 59 * time.Second, 1, 1}, // cached
		{"/metrics", "other", 403, 0, 2, 2},
		{"/metrics", "other", 403, 9 * time.Second, 2, 2}, // cached
		{"/metrics", "bad", 401, 0, 3, 2},
		{"/metrics", "good", 200, 2 * time.Second, 4, 3}, // allow TTL passed: reviewed again
		{"/metrics", "other", 403, 0, 5, 4},              // deny TTL passed
		{"/other", "good", 403, 0, 6, 5},                 // per path
	} {
		now = now.Add(tt.advance)
		if got := get(tt.path, tt.token); got != tt.want {
			t.Errorf("GET %s with %q = %d, want %d", tt.path, tt.token, got, tt.want)
		}
		if tokens, sars := counts(); tokens != tt.wantTokens || sars != tt.wantSA {
			t.Errorf("after GET %s with %q: %d TokenReviews, %d SubjectAccessReviews; want %d, %d", tt.path, tt.token, tokens, sars, tt.wantTokens, tt.wantSA)
		}
	}
}

// writeKeyPair writes a self-signed certificate for cn and its key to dir, returning the
// certificate.
func writeKeyPair(t *testing.T, dir, cn string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

// TestServerTLS: the files' certificate is served and a renewed one is picked up without a
// restart; without files a self-signed certificate is served; one file alone is an error.
func TestServerTLS(t *testing.T) {
	dir := t.TempDir()
	writeKeyPair(t, dir, "first")
	cfg, err := ServerTLS(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	served := func(cfg *tls.Config) string {
		t.Helper()
		// As the agent serves: a TLS listener with cfg as it is.
		ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			if c, err := ln.Accept(); err == nil {
				_ = c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the certificate only
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := served(cfg); cn != "first" {
		t.Errorf("served %q, want the file's certificate (first)", cn)
	}
	time.Sleep(10 * time.Millisecond) // a later modification time
	writeKeyPair(t, dir, "renewed")
	if cn := served(cfg); cn != "renewed" {
		t.Errorf("served %q after renewal, want renewed", cn)
	}
	self, err := ServerTLS("", "", "agent.example")
	if err != nil {
		t.Fatal(err)
	}
	if cn := served(self); cn != "reconscope-agent" {
		t.Errorf("self-signed certificate names %q", cn)
	}
	if _, err := ServerTLS(filepath.Join(dir, "tls.crt"), ""); err == nil {
		t.Error("a certificate without a key: no error")
	}
}
