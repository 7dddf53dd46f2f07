//go:build compat

package symbols

import "testing"

// TestGo127 runs TestOlderGo's checks (functions, sites, itabs stripped and unstripped, the
// type names behind error itabs, runtime.g.goid) on the fixture program built with go1.27.3,
// the newer release this project traces (make compat): Go 1.27 moved the type data's end
// in runtime.moduledata and dropped itablinks (its itabs lie in the type data).
func TestGo127(t *testing.T) {
	testGoReleases(t, []string{"go1.27.3"})
}
