// Package grafana holds no agent code: it is the folder of reconscope's Grafana dashboard
// (reconscope-dashboard.json, and kustomization.yaml, the kustomize component that makes it a
// ConfigMap), with the part of Grafana's dashboard model that reconscope's tests read (Read,
// Dashboard, Panel), so that the deploy tests and the end-to-end test read it one way.
package grafana

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

//go:embed reconscope-dashboard.json
var dashboardJSON []byte

// Dashboard is the part of Grafana's dashboard model the tests read.
type Dashboard struct {
	SchemaVersion int    `json:"schemaVersion"`
	UID           string `json:"uid"`
	Title         string `json:"title"`
	Templating    struct {
		List []Variable `json:"list"`
	} `json:"templating"`
	Panels []Panel `json:"panels"`
}

// Variable is one of the dashboard's template variables; Query is its query as Grafana stores
// it (a string, or an object holding one, by the variable's type).
type Variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

// Panel is one panel of the dashboard, or a row holding the panels it collapses.
type Panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []Panel `json:"panels"` // of a collapsed row
}

// Read parses reconscope-dashboard.json.
func Read() (Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return Dashboard{}, fmt.Errorf("parse reconscope-dashboard.json: %w", err)
	}
	return d, nil
}

// AllPanels returns the dashboard's panels and the panels its collapsed rows hold, each row
// before its own.
func (d Dashboard) AllPanels() []Panel {
	var out []Panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}
