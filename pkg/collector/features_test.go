package collector_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/reconscope/reconscope/internal/bpftest"
	"github.com/reconscope/reconscope/internal/testkit"
	"github.com/reconscope/reconscope/pkg/collector"
)

// TestFeaturesOfThisKernel: the probes answer on this kernel, and the kernel the tests run on
// is above the floor (CI's, and each kernel make kernels boots).
func TestFeaturesOfThisKernel(t *testing.T) {
	bpftest.Require(t)
	fs := collector.ProbeFeatures()
	for _, f := range fs {
		t.Logf("%-15s %-55s since %-5s err=%v", f.Key, f.Name, f.Since, f.Err)
		if f.Err != nil && !f.Missing() {
			t.Errorf("%s: the probe failed instead of answering: %v", f.Key, f.Err)
		}
	}
	if err := fs.Floor(); err != nil {
		t.Fatalf("this kernel is below the floor: %v", err)
	}
}

// TestBelowFloorRefusal forces each required feature missing in turn: New refuses in one line
// naming the feature and the release it exists from, and loads nothing.
func TestBelowFloorRefusal(t *testing.T) {
	bpftest.Require(t)
	for _, f := range collector.ProbeFeatures() {
		if !f.Required {
			continue
		}
		t.Run(f.Key, func(t *testing.T) {
			t.Setenv(collector.PretendMissingEnv, f.Key)
			var logs bytes.Buffer
			c, err := collector.New(collector.Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			if err == nil {
				c.Close()
				t.Fatalf("New loaded with %s missing", f.Key)
			}
			if !errors.Is(err, collector.ErrBelowFloor) {
				t.Fatalf("error is not ErrBelowFloor: %v", err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("refusal is more than one line:\n%s", msg)
			}
			for _, want := range []string{f.Name, "Linux " + f.Since + "+", "Linux " + collector.MinKernel + " or later"} {
				if !strings.Contains(msg, want) {
					t.Errorf("refusal %q does not say %q", msg, want)
				}
			}
			if logs.Len() != 0 {
				t.Errorf("New logged before refusing:\n%s", logs.String())
			}
		})
	}
}

// TestFallbackSingleUprobes forces uprobe_multi missing: New loads, attaches one uprobe per
// site, and says so in one info line.
func TestFallbackSingleUprobes(t *testing.T) {
	bpftest.Require(t)
	t.Setenv(collector.PretendMissingEnv, "uprobe_multi")
	var logs bytes.Buffer
	c, err := collector.New(collector.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.UprobeMulti() {
		t.Error("uprobe_multi used although it is missing")
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=INFO") || !strings.Contains(lines[0], "uprobe_multi links (Linux 6.6+): attaching one uprobe per site") {
		t.Errorf("want one info line about the fallback, got:\n%s", logs.String())
	}
}

// TestFallbackNoRawTracepoint forces raw tracepoints missing: New loads, and exec
// notifications are refused with a clear reason (discovery then relies on its /proc scan).
func TestFallbackNoRawTracepoint(t *testing.T) {
	bpftest.Require(t)
	t.Setenv(collector.PretendMissingEnv, "raw_tracepoint")
	c, err := collector.New(collector.Options{Logger: testkit.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.WatchExecs(context.Background())
	if err == nil || !strings.Contains(err.Error(), "raw tracepoints") || !strings.Contains(err.Error(), "4.17") {
		t.Fatalf("WatchExecs without raw tracepoints: %v", err)
	}
}

// TestFloorMessage: several missing features make one line naming each.
func TestFloorMessage(t *testing.T) {
	fs := collector.Features{
		{Key: "a", Name: "feature A", Since: "5.8", Required: true, Err: errNotSupported()},
		{Key: "b", Name: "feature B", Since: "5.15", Required: true, Err: errNotSupported()},
		{Key: "c", Name: "optional C", Since: "6.6", Err: errNotSupported()},
		{Key: "d", Name: "present D", Since: "4.17", Required: true},
	}
	err := fs.Floor()
	if err == nil {
		t.Fatal("no error with required features missing")
	}
	msg := err.Error()
	for _, want := range []string{"feature A (Linux 5.8+)", "feature B (Linux 5.15+)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "optional C") || strings.Contains(msg, "present D") {
		t.Errorf("%q names a feature that is not a missing requirement", msg)
	}
	if fs.Has("a") || fs.Has("c") {
		t.Error("Has true for a missing feature")
	}
	if !fs.Has("d") {
		t.Error("Has(d) false for a present feature")
	}
}

func errNotSupported() error { return fmt.Errorf("probe: %w", ebpf.ErrNotSupported) }
