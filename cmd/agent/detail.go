package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/reconscope/reconscope/pkg/detail"
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
