// Package cli is what the project's commands (reconscope-agent, kubectl-reconscope) share of
// their command lines, on cobra and pflag: one style of --help, of usage errors and of exit
// statuses, flags from the environment, and shell completion.
//
// The contract: --help prints a command's summary and its flags to standard output and exits
// 0; a usage error (an unknown command or flag, a bad flag value, a bad variable of the
// environment) is one plain line on standard error naming the command, "reconscope-agent
// inspect: unknown flag: --jsno (see --help)", and exits 2.
package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// ExitUsage is the exit status of a usage error.
const ExitUsage = 2

// helpWidth is the width --help wraps the flags' descriptions at.
const helpWidth = 100

// envAnnotation marks a command whose flags are read from the environment too (FromEnv); its
// value is the variables' prefix.
const envAnnotation = "reconscope_env_prefix"

// NewProgram returns the root command of a program. name is the program as users type it
// ("reconscope-agent", "kubectl reconscope"); usage is what --help prints, and what a call
// without a command prints to standard error before exiting 2. Add the commands with
// AddCommand; cobra adds help and completion (bash, zsh, fish, powershell).
func NewProgram(name, usage string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           strings.ReplaceAll(name, " ", "-"),
		Long:          usage,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: name},
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q", args[0])
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprint(stderr, usage)
			return Exit(ExitUsage)
		},
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetHelpFunc(printHelp)
	root.SetFlagErrorFunc(flagError)
	return root
}

// NewCommand returns a command of a program: use is its name and arguments as the first line
// of summary shows them, summary what --help prints above the flags. Its flags may come
// anywhere on the command line, before or after its arguments; a command takes no argument
// unless its Args says otherwise.
func NewCommand(use, summary string) *cobra.Command {
	return &cobra.Command{
		Use:  use,
		Long: strings.TrimSpace(summary),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unexpected argument %q", args[0])
			}
			return nil
		},
		ValidArgsFunction: cobra.NoFileCompletions,
	}
}

// Run executes root with args and returns the program's exit status: 0, the status a
// command's RunE gave to Exit, or 2 after a usage error, printed here.
func Run(root *cobra.Command, args []string) int {
	// pflag's notices (a deprecated flag) go to standard error, never into a command's output.
	visit(root, func(c *cobra.Command) { c.Flags().SetOutput(root.ErrOrStderr()) })
	if cmd, _, err := root.Find(args); err == nil {
		if err := singleDash(cmd, args); err != nil {
			return UsageError(root.ErrOrStderr(), cmd.CommandPath(), "%v (see --help)", err)
		}
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	var code exitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	}
	if cmd == nil {
		cmd = root
	}
	return UsageError(root.ErrOrStderr(), cmd.CommandPath(), "%v (see --help)", err)
}

// exitStatus is the error a command returns to end the program with that status, having said
// why itself.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// Exit is what a command's RunE returns to end the program with status code, after saying
// why itself: nil for 0.
func Exit(code int) error {
	if code == 0 {
		return nil
	}
	return exitStatus(code)
}

// RunE adapts a command body that returns an exit status to cobra's RunE.
func RunE(body func(args []string) int) func(*cobra.Command, []string) error {
	return func(_ *cobra.Command, args []string) error { return Exit(body(args)) }
}

// UsageError prints a usage error of command cmd ("reconscope-agent trace") and returns exit
// status 2.
func UsageError(stderr io.Writer, cmd, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n", cmd, fmt.Sprintf(format, a...))
	return ExitUsage
}

// visit calls f on cmd and every command under it.
func visit(cmd *cobra.Command, f func(*cobra.Command)) {
	f(cmd)
	for _, c := range cmd.Commands() {
		visit(c, f)
	}
}

// singleDash refuses a long flag of cmd given one dash, the Go flag package's spelling, which
// pflag would otherwise take for a letter and its value (-output=json: -o utput=json).
func singleDash(cmd *cobra.Command, args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' {
			continue
		}
		name, _, _ := strings.Cut(a[1:], "=")
		if len(name) > 1 && (cmd.Flags().Lookup(name) != nil || name == "help") {
			return fmt.Errorf("unknown flag %s: a long flag takes two dashes: -%s", a, a)
		}
	}
	return nil
}

// flagError says what was wrong with a flag. A long flag given one dash (-pid, the Go flag
// package's spelling) is named with the two it takes.
func flagError(cmd *cobra.Command, err error) error {
	var missing *pflag.NotExistError
	if errors.As(err, &missing) {
		if long := missing.GetSpecifiedShortnames(); len(long) > 1 {
			name, _, _ := strings.Cut(long, "=")
			if cmd.Flags().Lookup(name) != nil {
				return fmt.Errorf("%w: a long flag takes two dashes: --%s", err, long)
			}
		}
	}
	return err
}

// printHelp prints a command's --help: its summary, then its flags, then, for a command that
// reads them from the environment, the variables.
func printHelp(cmd *cobra.Command, _ []string) {
	out := cmd.OutOrStdout()
	fmt.Fprintln(out, strings.TrimRight(cmd.Long, "\n "))
	// The command's own flags; --help is said by the program's usage.
	own := pflag.NewFlagSet(cmd.Name(), pflag.ContinueOnError)
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			own.AddFlag(f)
		}
	})
	if own.HasAvailableFlags() {
		fmt.Fprintf(out, "\nFlags:\n%s", own.FlagUsagesWrapped(helpWidth))
	}
	if prefix, ok := cmd.Annotations[envAnnotation]; ok {
		fmt.Fprintf(out, "\nEnvironment:\n"+
			"  Every flag can also be set as %s<FLAG>, the flag's name in upper case with '_' for\n"+
			"  '-' (%s). The command line wins over the environment,\n"+
			"  which wins over the default; a repeatable flag takes one value from the environment.\n",
			prefix, envExample(cmd, prefix))
	}
}

// envExample is one of cmd's flags as a variable of the environment, with its default.
func envExample(cmd *cobra.Command, prefix string) string {
	var ex string
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if ex == "" && !f.Hidden && f.Name != "help" && f.DefValue != "" && f.Value.Type() != "bool" {
			ex = EnvName(prefix, f.Name) + "=" + f.DefValue
		}
	})
	return ex
}

// EnvName is the variable of the environment that sets flag name: prefix, then the name in
// upper case with '_' for '-' ("RECONSCOPE_", "metrics-addr": RECONSCOPE_METRICS_ADDR).
func EnvName(prefix, name string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// FromEnv makes cmd take each of its flags not given on the command line from the
// environment, as EnvName(prefix, flag) when lookup finds it: the command line wins over the
// environment, the environment over the default. A bad value is a usage error naming the
// variable. A repeatable flag takes one value from the environment. --help says so.
func FromEnv(cmd *cobra.Command, prefix string, lookup func(string) (string, bool)) {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[envAnnotation] = prefix
	next := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if err := SetFromEnv(c.Flags(), prefix, lookup); err != nil {
			return err
		}
		if next != nil {
			return next(c, args)
		}
		return nil
	}
}

// SetFromEnv sets each flag of fs that the command line did not set from the environment
// (FromEnv). It stops at the first bad value.
func SetFromEnv(fs *pflag.FlagSet, prefix string, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" || f.Deprecated != "" {
			return
		}
		name := EnvName(prefix, f.Name)
		if v, ok := lookup(name); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
	})
	return err
}

// Complete offers values when a shell completes flag name of cmd (their order is kept).
func Complete(cmd *cobra.Command, name string, values ...string) {
	if err := cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveKeepOrder)); err != nil {
		panic(err) // a flag of the program's own that does not exist
	}
}
