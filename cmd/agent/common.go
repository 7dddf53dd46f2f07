package main

import (
	"strings"
	"time"

	"github.com/reconscope/reconscope/pkg/probes"
	"github.com/reconscope/reconscope/pkg/span"
)

// probeFlags collects repeated --probe flags.
type probeFlags []*probes.Probe

func (p *probeFlags) String() string {
	names := make([]string, len(*p))
	for i, pr := range *p {
		names[i] = pr.ID
	}
	return strings.Join(names, ",")
}

func (p *probeFlags) Set(v string) error {
	pr, err := probes.ParseSyncProbe(v)
	if err != nil {
		return err
	}
	*p = append(*p, pr)
	return nil
}

func spanOptions(abandon time.Duration) span.Options {
	return span.Options{AbandonAfter: abandon}
}
