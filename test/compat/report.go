package compat

// Cell is one measured cell of the matrix, as the report file holds it (a JSON line each):
// the tests write it, docgen reads it.
type Cell struct {
	Kind       string `json:"kind"` // "go" or "controller-runtime"
	Go         string `json:"go"`
	CR         string `json:"controller_runtime"`
	ClientGo   string `json:"client_go"`
	Stripped   bool   `json:"stripped"`
	Reconciles int    `json:"reconciles"`
	Spans      int    `json:"spans"`
	// Sites: the stripped build's probe sites, each checked against its unstripped twin's.
	Sites     int    `json:"sites,omitempty"`
	Pass      bool   `json:"pass"`
	Detail    string `json:"detail,omitempty"`
	BuildSecs int    `json:"build_seconds"`
}
