package bpftest

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records whether SkipOrFail skipped or failed it.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

// TestSkipOrFail: without RECONSCOPE_REQUIRE_BPF a missing piece of the machine skips, with the
// reason; with RECONSCOPE_REQUIRE_BPF=1 it fails, with the reason.
func TestSkipOrFail(t *testing.T) {
	for _, c := range []struct {
		env      string
		wantFail bool
	}{{"", false}, {"0", false}, {"1", true}} {
		t.Setenv(RequireEnv, c.env)
		r := &recorder{TB: t}
		SkipOrFail(r, "no %s here", "unshare")
		got := r.skipped
		if c.wantFail {
			got = r.failed
		}
		if (r.failed != "") != c.wantFail || (r.skipped != "") == c.wantFail || !strings.Contains(got, "no unshare here") {
			t.Errorf("%s=%q: skipped %q, failed %q", RequireEnv, c.env, r.skipped, r.failed)
		}
	}
}
