package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestAlertRules runs Prometheus's own checks on the shipped alert rules: promtool check rules
// (syntax, PromQL) and promtool test rules (reconscope-rules_test.yaml: each alert fires on
// the series it is for, at the time it should, with its labels and text, and not on the
// others). The chart's copy must be the same file.
func TestAlertRules(t *testing.T) {
	rules := filepath.Join("prometheus", "reconscope-rules.yaml")
	a, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "rules", "reconscope-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("%s and the chart's rules/reconscope-rules.yaml differ: copy one onto the other", rules)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("RECONSCOPE_REQUIRE_PROMETHEUS") == "1" {
			t.Fatalf("promtool (Debian's prometheus package) is required (RECONSCOPE_REQUIRE_PROMETHEUS=1): %v", err)
		}
		t.Skipf("no promtool (apt-get install prometheus): %v", err)
	}
	for _, args := range [][]string{
		{"check", "rules", rules},
		{"test", "rules", filepath.Join("prometheus", "reconscope-rules_test.yaml")},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
