// Command reconscope-agent traces Kubernetes controllers with eBPF: one span per reconcile,
// with no change to the traced programs.
//
// Commands:
//
//	reconscope-agent run                             the node agent (DaemonSet)
//	reconscope-agent trace   --pid PID | --exe PATH   live reconcile tree or JSON lines (root)
//	reconscope-agent inspect BINARY | --pid PID      what would be traced, without privileges
//	reconscope-agent version [-o json]
//	reconscope-agent completion bash|zsh|fish|powershell
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/klog/v2"

	"github.com/reconscope/reconscope/internal/cli"
)

const usage = `reconscope-agent traces Kubernetes controllers with eBPF: one span per reconcile
(controller, object, result, error, duration), with no change to the traced programs.

Usage:
  reconscope-agent <command> [flags]

Commands:
  run         the node agent (DaemonSet): find and trace every controller on this node,
              serve Prometheus metrics, send spans over OTLP
  trace       trace running controllers and print their reconciles (needs root, or CAP_BPF,
              CAP_PERFMON, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH)
  inspect     show what would be traced in a binary, without privileges
  version     print the version: module version, VCS revision, "(dirty)" for a build from
              a tree with uncommitted changes, Go release and arch (also --version; -o json)
  completion  print the shell completion script of bash, zsh, fish or powershell
              ('reconscope-agent completion bash --help' says how to load it)

Run 'reconscope-agent <command> --help' for a command's flags. Flags may come before or after
a command's arguments; long flags take two dashes (--pid), some have a one-letter form (-o).

Examples:
  kubectl apply -k deploy/        # reconscope-agent run, on every node
  sudo reconscope-agent trace --pid 4242
  sudo reconscope-agent trace --exe ./bin/manager -o json
  reconscope-agent inspect ./bin/manager -o json
`

func main() {
	oneProcessor(os.Args[1:])
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return cli.Run(newProgram(stdout, stderr), args)
}

// newProgram returns reconscope-agent's command line: its commands, their flags, and cobra's
// help and completion.
func newProgram(stdout, stderr io.Writer) *cobra.Command {
	root := cli.NewProgram(program, usage, stdout, stderr)
	root.Version = versionLine()
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(runCommand(stdout, stderr), traceCommand(stdout, stderr), inspectCommand(stdout, stderr), versionCommand(stdout, stderr))
	return root
}

// program is the name usage errors start with.
const program = "reconscope-agent"

// envPrefix starts the variables of the environment that set run's and trace's flags.
const envPrefix = "RECONSCOPE_"

// newCommand returns command use of reconscope-agent (internal/cli: --help and usage errors
// in the style the project's commands share).
func newCommand(use, summary string) *cobra.Command {
	return cli.NewCommand(use, summary)
}

// Values a shell completes for the flags that take one of a few.
var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{"auto", "text", "json"}
)

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
	return cli.UsageError(stderr, program+" "+cmd, format, a...)
}

// failed logs why the command stops and returns exit status 1.
func failed(log *slog.Logger, what string, err error) int {
	log.Error(what, "err", err)
	return 1
}
