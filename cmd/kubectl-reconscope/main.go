// Command kubectl-reconscope is reconscope's kubectl plugin, `kubectl reconscope`: a live view
// of the reconciles the node agents trace, with nothing but kubectl's own credentials.
//
//	kubectl reconscope tail [--controller GLOB] [-n NS] [--object NAME] [--errors] [-o tree|json]
//	kubectl reconscope top  [--interval 5s] [--sort rate|p99|errors]
//
// It finds the agents' pods by their label, and reads each agent's metrics port (GET /spans,
// GET /metrics) through the API server's pod proxy, or through a port-forward when the agents
// serve their metrics securely (docs/kubectl-plugin.md).
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/reconscope/reconscope/internal/cli"
)

const usage = `kubectl reconscope: a live view of the reconciles reconscope's node agents trace, through
the API server, with your kubeconfig's credentials.

Usage:
  kubectl reconscope <command> [flags]

Commands:
  tail      the reconciles of every agent, as they finish: a tree (as reconscope-agent trace
            prints it) or JSON lines (-o json, docs/json.md); the agents' last spans first
  top       controllers and objects ranked by reconcile rate, p99 duration or errors, from
            every agent's /metrics
  version   print the version

Run 'kubectl reconscope <command> --help' for a command's flags.

Examples:
  kubectl reconscope tail --controller deployment -n default
  kubectl reconscope tail --errors -o json
  kubectl reconscope top --sort errors
`

// version is set by the Makefile (-X main.version=...).
var version = "(devel)"

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
	case "tail":
		return runTail(rest, stdout, stderr)
	case "top":
		return runTop(rest, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "kubectl-reconscope", version)
		return 0
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "kubectl reconscope: unknown command %q\n\n%s", cmd, usage)
	return 2
}

// newFlagSet returns the flags of command name (internal/cli: --help and usage errors in the
// style the project's commands share).
func newFlagSet(name, summary string, stdout, stderr io.Writer) *cli.FlagSet {
	fs := cli.NewFlagSet("kubectl reconscope", name, summary, stdout, stderr)
	fs.NoArgs = true // no command takes a positional argument
	return fs
}

// usageError prints a usage error of the command cmd and returns exit status 2.
func usageError(stderr io.Writer, cmd, format string, a ...any) int {
	return cli.UsageError(stderr, "kubectl reconscope", cmd, format, a...)
}

// failed prints why the command stops and returns exit status 1.
func failed(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "kubectl reconscope %s: %v\n", cmd, err)
	return 1
}

// stringsFlag is a flag that may be given more than once; each value is kept, in order.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }
