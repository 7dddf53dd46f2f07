package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/reconscope/reconscope/pkg/detail"
	"github.com/reconscope/reconscope/pkg/discovery"
	"github.com/reconscope/reconscope/pkg/probes"
)

// detailPath is where run serves on-demand detail switches, behind --metrics-secure only: a
// switch changes what the agent costs the traced processes, so an anonymous request must not
// make one. A caller needs nonResourceURLs ["/detail"], verbs ["post"] (["get"] to list).
const detailPath = "/detail"

// detailSwitch is the answer of detailPath: the controllers switched to detail calls, and
// until when.
type detailSwitch struct {
	Switched map[string]time.Time `json:"switched"`
}

// detailHandler serves detailPath with pol: GET lists the switches; POST
// ?controller=NAME[&for=DURATION] switches NAME to detail calls for DURATION (default
// --detail-switch-for), 409 Conflict when --detail-switch-max controllers are switched already.
//
// known says whether the agent traces a controller of that name: only those are switched, so
// that a caller cannot fill the policy or reconscope_detail_switches_total with names.
func detailHandler(pol *detail.Policy, known func(controller string) bool, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
		case http.MethodPost:
			controller := r.URL.Query().Get("controller")
			var d time.Duration
			if v := r.URL.Query().Get("for"); v != "" {
				var err error
				if d, err = time.ParseDuration(v); err != nil || d <= 0 {
					http.Error(w, fmt.Sprintf("for=%q: want a positive duration such as 5m", v), http.StatusBadRequest)
					return
				}
			}
			if controller == "" {
				http.Error(w, "controller=NAME: the controller to switch to detail calls, as its spans name it", http.StatusBadRequest)
				return
			}
			if !known(controller) {
				http.Error(w, fmt.Sprintf("controller %q: no span of it was seen on this node (names as spans carry them)", controller), http.StatusNotFound)
				return
			}
			err := pol.Switch(controller, d, "requested on "+detailPath+" from "+r.RemoteAddr, time.Now())
			if errors.Is(err, detail.ErrTooManySwitched) {
				http.Error(w, err.Error(), http.StatusConflict)
				return
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "GET lists the switches, POST ?controller=NAME[&for=DURATION] makes one", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(detailSwitch{Switched: pol.Switched()}); err != nil {
			log.Debug("answer "+detailPath, "err", err)
		}
	})
}

// detailReload is how often run reads its config file again for a change of its detail
// section: a mounted ConfigMap changes within the kubelet's sync period (a minute or so) anyway.
const detailReload = 2 * time.Second

// loadDetailConfig reads the detail section of the config file at path (nil when it has none).
func loadDetailConfig(path string) (*detail.Config, []byte, error) {
	cfg, err := discovery.LoadConfig(path)
	if err != nil {
		return nil, nil, err
	}
	if len(cfg.Detail) == 0 || string(cfg.Detail) == "null" {
		return nil, nil, nil
	}
	dc, err := detail.ParseConfig(cfg.Detail)
	if err != nil {
		return nil, nil, fmt.Errorf("config %s: %w", path, err)
	}
	return dc, cfg.Detail, nil
}

// watchDetailConfig reads the config file at path every detailReload until ctx ends and, when
// its detail section changed (seen is the one in force), puts pol at its levels over the flags'
// (def, rules): the reconciles in flight keep the level they began with. A file that does not
// read or parse keeps the levels in force, said once per change.
func watchDetailConfig(ctx context.Context, path string, seen []byte, def probes.Detail, rules []detail.Rule, pol *detail.Policy, log *slog.Logger) {
	tick := time.NewTicker(detailReload)
	defer tick.Stop()
	var failed string
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		dc, raw, err := loadDetailConfig(path)
		if err == nil && bytes.Equal(raw, seen) {
			failed = ""
			continue
		}
		d, r := def, rules
		if err == nil && dc != nil {
			d, r, err = dc.Levels(def, rules)
		}
		if err == nil {
			err = pol.SetLevels(d, r, time.Now())
		}
		if err != nil {
			if err.Error() != failed {
				failed = err.Error()
				log.Error("config not reloaded: the detail in force stays", "config", path, "err", err)
			}
			continue
		}
		seen, failed = raw, ""
		dr := detailRules(r)
		log.Info("config reloaded: detail", "config", path, "default", d.String(), "controllers", (&dr).String())
	}
}
