// Package cli is what the project's commands (reconscope-agent, kubectl-reconscope) share of
// their command lines: one style of --help and of usage errors.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// FlagSet is a command's flags: --help prints the summary and the flags to Stdout; a bad flag
// prints one line to Stderr, naming the program and the command.
type FlagSet struct {
	*flag.FlagSet
	// Program names the program in error lines ("reconscope-agent", "kubectl reconscope").
	Program        string
	Summary        string
	Stdout, Stderr io.Writer
	// NoArgs makes an argument left after the flags a usage error.
	NoArgs bool
}

// NewFlagSet returns the flags of command name of program.
func NewFlagSet(program, name, summary string, stdout, stderr io.Writer) *FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &FlagSet{FlagSet: fs, Program: program, Summary: summary, Stdout: stdout, Stderr: stderr}
}

// ParseArgs parses args; it returns (exit code, true) when the program should exit: 0 after
// --help, 2 after a usage error.
func (fs *FlagSet) ParseArgs(args []string) (int, bool) {
	err := fs.Parse(args)
	switch {
	case err == nil:
		if fs.NoArgs && fs.NArg() > 0 {
			return UsageError(fs.Stderr, fs.Program, fs.Name(), "unexpected argument %q (see --help)", fs.Arg(0)), true
		}
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(fs.Stdout, "%s\n\nFlags:\n", strings.TrimSpace(fs.Summary))
		fs.SetOutput(fs.Stdout)
		fs.PrintDefaults()
		return 0, true
	}
	return UsageError(fs.Stderr, fs.Program, fs.Name(), "%v (see --help)", err), true
}

// UsageError prints a usage error of command cmd of program and returns exit status 2.
func UsageError(stderr io.Writer, program, cmd, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s %s: %s\n", program, cmd, fmt.Sprintf(format, a...))
	return 2
}
