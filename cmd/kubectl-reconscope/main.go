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

	"github.com/spf13/cobra"

	"github.com/reconscope/reconscope/internal/cli"
)

const usage = `kubectl reconscope: a live view of the reconciles reconscope's node agents trace, through
the API server, with your kubeconfig's credentials.

Usage:
  kubectl reconscope <command> [flags]

Commands:
  tail        the reconciles of every agent, as they finish: a tree (as reconscope-agent
              trace prints it) or JSON lines (-o json, docs/json.md); the agents' last
              spans first
  top         controllers and objects ranked by reconcile rate, p99 duration or errors,
              from every agent's /metrics
  version     print the version
  completion  print the shell completion script of bash, zsh, fish or powershell (for
              'kubectl reconscope' itself, kubectl 1.26 and later run an executable named
              kubectl_complete-reconscope: docs/kubectl-plugin.md)

Run 'kubectl reconscope <command> --help' for a command's flags. Flags may come anywhere
after the command; long flags take two dashes, some have a one-letter form (-n, -o).

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

// run runs the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return cli.Run(newProgram(stdout, stderr), args)
}

// program is the name usage errors start with.
const program = "kubectl reconscope"

// newProgram returns kubectl reconscope's command line: its commands, their flags, and
// cobra's help and completion.
func newProgram(stdout, stderr io.Writer) *cobra.Command {
	root := cli.NewProgram(program, usage, stdout, stderr)
	root.Version = "kubectl-reconscope " + version
	root.SetVersionTemplate("{{.Version}}\n")
	versionCmd := cli.NewCommand("version", "Usage: kubectl reconscope version\n\nPrints the version.")
	versionCmd.RunE = cli.RunE(func([]string) int { fmt.Fprintln(stdout, "kubectl-reconscope", version); return 0 })
	root.AddCommand(tailCommand(stdout, stderr), topCommand(stdout, stderr), versionCmd)
	return root
}

// usageError prints a usage error of the command cmd and returns exit status 2.
func usageError(stderr io.Writer, cmd, format string, a ...any) int {
	return cli.UsageError(stderr, program+" "+cmd, format, a...)
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
func (s *stringsFlag) Type() string       { return "strings" }
