package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/reconscope/reconscope/internal/cli"
	"github.com/reconscope/reconscope/pkg/exporter"
)

const tailSummary = `Usage: kubectl reconscope tail [flags]

Prints the reconciles of every agent: first the last spans each agent keeps (its
--recent-spans, 1000 by default), oldest first, then each new one as it finishes, until
Ctrl-C (--follow=false: the kept spans only). Output: a tree, as 'reconscope-agent trace'
prints it, or with -o json the JSON lines the agent writes (docs/json.md).

--controller (a glob, repeatable), -n/--namespace and --object (the reconciled object's
namespace and name) and --errors (result error only) select the spans; each agent applies
them before sending.

An agent that falls behind is not waited for: it drops a reader more than 1024 spans behind,
and tail says so (docs/kubectl-plugin.md).`

func tailCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := cli.NewCommand("tail", tailSummary)
	fs := cmd.Flags()
	cf := addClusterFlags(fs)
	var controllers stringsFlag
	fs.Var(&controllers, "controller", "only this controller, by the name its spans carry; a glob such as 'replica*' (repeatable)")
	var namespace, object, output string
	fs.StringVarP(&namespace, "namespace", "n", "", "only reconciles of objects in this namespace")
	fs.StringVar(&object, "object", "", "only reconciles of the object of this name")
	errorsOnly := fs.Bool("errors", false, "only reconciles that returned an error")
	fs.StringVarP(&output, "output", "o", "tree", "output format: tree or json (JSON lines, docs/json.md)")
	follow := fs.Bool("follow", true, "keep printing new reconciles (false: print the spans the agents keep, then exit)")
	cli.Complete(cmd, "output", "tree", "json")
	completeClusterFlags(cmd)
	cmd.RunE = cli.RunE(func([]string) int {
		if err := cf.check(); err != nil {
			return usageError(stderr, "tail", "%v", err)
		}
		filter, err := exporter.ParseSpanFilter(controllers, namespace, object, *errorsOnly)
		if err != nil {
			return usageError(stderr, "tail", "--%v", err)
		}
		if output != "tree" && output != "json" {
			return usageError(stderr, "tail", "--output %q: want tree or json", output)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		sources, end, err := cf.connect(ctx, stderr)
		if err != nil {
			return failed(stderr, "tail", err)
		}
		defer end()
		if err := tail(ctx, sources, filter, *follow, newSpanPrinter(output, stdout), stderr); err != nil {
			return failed(stderr, "tail", err)
		}
		return 0
	})
	return cmd
}

// spanLine is one span an agent sent: its JSON line as sent, and decoded.
type spanLine struct {
	raw  []byte
	span exporter.JSONSpan
}

// spanPrinter prints spans in one output format.
type spanPrinter func(spanLine) error

func newSpanPrinter(output string, w io.Writer) spanPrinter {
	if output == "json" {
		return func(l spanLine) error { _, err := w.Write(l.raw); return err }
	}
	tree := exporter.NewTreeWriter(w, exporter.JSONClock)
	return func(l spanLine) error { return tree.Write(exporter.FromJSON(l.span)) }
}

// query is the GET /spans query of filter.
func query(filter exporter.SpanFilter, follow bool) url.Values {
	q := url.Values{}
	for _, c := range filter.Controllers {
		q.Add("controller", c)
	}
	if filter.Namespace != "" {
		q.Set("namespace", filter.Namespace)
	}
	if filter.Object != "" {
		q.Set("object", filter.Object)
	}
	if filter.Errors {
		q.Set("errors", "1")
	}
	if follow {
		q.Set("follow", "1")
	}
	return q
}

// tail reads GET /spans of every source and prints the spans filter selects. Without follow
// it prints them all at the end, by start time; with follow, as they come, until ctx ends or
// every agent's stream has ended. It fails only when no agent could be read.
func tail(ctx context.Context, sources []source, filter exporter.SpanFilter, follow bool, print spanPrinter, stderr io.Writer) error {
	lines := make(chan spanLine, 256)
	results := make(chan error, len(sources))
	q := query(filter, follow)
	for _, s := range sources {
		go func() {
			body, err := s.get(ctx, "/spans", q)
			if err != nil {
				results <- fmt.Errorf("agent %s: %w", s.name, err)
				return
			}
			defer body.Close()
			r := bufio.NewReaderSize(body, 64<<10)
			for {
				raw, err := r.ReadBytes('\n')
				if len(raw) > 0 && raw[len(raw)-1] == '\n' {
					var l spanLine
					if json.Unmarshal(raw, &l.span) == nil && filter.Match(l.span.Controller, l.span.Namespace, l.span.Name, l.span.Result) {
						l.raw = raw
						select {
						case lines <- l:
						case <-ctx.Done():
							results <- nil
							return
						}
					}
				}
				if err != nil {
					if follow && ctx.Err() == nil {
						fmt.Fprintf(stderr, "kubectl reconscope tail: the stream of agent %s ended (an agent drops a reader more than %d spans behind: try narrower filters)\n", s.name, exporter.FollowerBacklog)
					}
					results <- nil
					return
				}
			}
		}()
	}
	var kept []spanLine
	failures, running := 0, len(sources)
	for running > 0 {
		select {
		case l := <-lines:
			if !follow {
				kept = append(kept, l)
				continue
			}
			if err := print(l); err != nil {
				return err
			}
		case err := <-results:
			running--
			if err != nil {
				failures++
				fmt.Fprintf(stderr, "kubectl reconscope tail: %v\n", err)
			}
		case <-ctx.Done():
			return nil
		}
	}
	for done := false; !done; { // what the readers handed over before they ended
		select {
		case l := <-lines:
			kept = append(kept, l)
		default:
			done = true
		}
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].span.Start.Before(kept[j].span.Start) })
	for _, l := range kept {
		if err := print(l); err != nil {
			return err
		}
	}
	if failures == len(sources) {
		return fmt.Errorf("no agent could be read (%d failed, above)", failures)
	}
	return nil
}
