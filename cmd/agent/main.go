// Command reconscope-agent traces Kubernetes controllers with eBPF: one span per reconcile,
// with no change to the traced programs.
//
// Commands:
//
//	reconscope-agent run                             the node agent (DaemonSet)
//	reconscope-agent trace   --pid PID | --exe PATH   live reconcile tree or JSON lines (root)
//	reconscope-agent inspect BINARY | --pid PID      what would be traced, without privileges
//	reconscope-agent version
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/term"
	"k8s.io/klog/v2"

	"github.com/reconscope/reconscope/internal/cli"
)

const usage = `reconscope-agent traces Kubernetes controllers with eBPF: one span per reconcile
(controller, object, result, error, duration), with no change to the traced programs.

Usage:
  reconscope-agent <command> [flags]

Commands:
  run       the node agent (DaemonSet): find and trace every controller on this node, serve
            Prometheus metrics, send spans over OTLP
  trace     trace running controllers and print their reconciles (needs root, or CAP_BPF,
            CAP_PERFMON, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH)
  inspect   show what would be traced in a binary, without privileges
  version   print the version: module version, VCS revision, "(dirty)" for a build from
            a tree with uncommitted changes, Go release (also --version)

Run 'reconscope-agent <command> --help' for a command's flags.

Examples:
  kubectl apply -k deploy/        # reconscope-agent run, on every node
  sudo reconscope-agent trace --pid 4242
  sudo reconscope-agent trace --exe ./bin/manager --output json
  reconscope-agent inspect ./bin/manager
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return runRun(rest, stdout, stderr)
	case "trace":
		return runTrace(rest, stdout, stderr)
	case "inspect":
		return runInspect(rest, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "reconscope-agent: unknown command %q\n\n%s", cmd, usage)
	return 2
}

// newFlagSet returns the flags of command name (internal/cli: --help and usage errors in the
// style the project's commands share).
func newFlagSet(name, summary string, stdout, stderr io.Writer) *cli.FlagSet {
	return cli.NewFlagSet("reconscope-agent", name, summary, stdout, stderr)
}

// newLogger is the logger of every command: level debug, info, warn or error; format text,
// json, or auto (text on a terminal, JSON otherwise). client-go's own log lines (klog: its
// reflectors' and watches' errors) go to it too, marked logger=client-go, in the same format
// instead of klog's own on stderr.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	log, err := newSlog(w, level, format)
	if err != nil {
		return nil, err
	}
	klog.SetSlogLogger(log.With("logger", "client-go"))
	return log, nil
}

func newSlog(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "auto":
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return slog.New(slog.NewTextHandler(w, opts)), nil
		}
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want text, json or auto", format)
}

// run and trace end with an error in one style: a usage error (a flag or its value: exit 2)
// is one plain line naming the command, like the flag parser's own; a failure to set up or to
// trace (exit 1) is a record of the command's logger, text on a terminal and JSON in a pod,
// like every other line the agent writes.

// usageError prints a usage error of the command cmd and returns exit status 2.
func usageError(stderr io.Writer, cmd, format string, a ...any) int {
	return cli.UsageError(stderr, "reconscope-agent", cmd, format, a...)
}

// failed logs why the command stops and returns exit status 1.
func failed(log *slog.Logger, what string, err error) int {
	log.Error(what, "err", err)
	return 1
}
