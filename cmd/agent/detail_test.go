package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/detail"
	"github.com/reconscope/reconscope/pkg/probes"
)

// TestDetailHandler: what POST and GET /detail answer, behind the token filter
// (TestRunMetricsSecure has the filter): a switch of a traced controller, one past
// --detail-switch-max, one of a controller not traced, bad requests; each switch counted once.
func TestDetailHandler(t *testing.T) {
	var switched []string
	pol, err := detail.New(detail.Options{Default: probes.DetailReconcile, Switches: true, MaxSwitched: 1, Logger: testkit.Quiet(),
		OnSwitch: func(c string, to probes.Detail, _ string) { switched = append(switched, c+"="+to.String()) }})
	if err != nil {
		t.Fatal(err)
	}
	known := func(c string) bool { return c == "deployment" || c == "replicaset" }
	h := detailHandler(pol, known, testkit.Quiet())
	for _, tt := range []struct {
		method, target string
		want           int
		body           string
	}{
		{http.MethodGet, "/detail", http.StatusOK, `{"switched":{}}`},
		{http.MethodPost, "/detail?controller=deployment&for=2m", http.StatusOK, `"deployment":`},
		{http.MethodPost, "/detail?controller=deployment", http.StatusOK, `"deployment":`}, // extends it
		{http.MethodPost, "/detail?controller=replicaset", http.StatusConflict, "too many"},
		{http.MethodPost, "/detail?controller=job", http.StatusNotFound, "no span of it"},
		{http.MethodPost, "/detail?controller=deployment&for=-1s", http.StatusBadRequest, "positive duration"},
		{http.MethodPost, "/detail", http.StatusBadRequest, "controller=NAME"},
		{http.MethodDelete, "/detail", http.StatusMethodNotAllowed, "POST"},
		{http.MethodGet, "/detail", http.StatusOK, `"deployment":`},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.target, nil))
		if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.body) {
			t.Errorf("%s %s = %d %q, want %d and %q", tt.method, tt.target, rec.Code, rec.Body.String(), tt.want, tt.body)
		}
	}
	if len(switched) != 1 || switched[0] != "deployment=calls" {
		t.Errorf("switches reported %v, want deployment to calls once", switched)
	}
}
