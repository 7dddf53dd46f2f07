package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// program is a program with one command, greet NAME? --loud --times N -o text|json, whose run
// records what it was given.
func program(t *testing.T, env map[string]string) (root *cobra.Command, out, errOut *strings.Builder, got *[]string) {
	t.Helper()
	out, errOut, got = &strings.Builder{}, &strings.Builder{}, &[]string{}
	root = NewProgram("demo ctl", "Usage: demo ctl <command>\n", out, errOut)
	cmd := NewCommand("greet", "Usage: demo ctl greet [NAME] [flags]\n\nGreets.")
	cmd.Args = cobra.MaximumNArgs(1)
	loud := cmd.Flags().Bool("loud", false, "shout")
	times := cmd.Flags().Int("times", 1, "how often")
	output := cmd.Flags().StringP("output", "o", "text", "text or json")
	Complete(cmd, "output", "text", "json")
	FromEnv(cmd, "DEMO_", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	cmd.RunE = RunE(func(args []string) int {
		*got = append(args, strings.Join([]string{boolString(*loud), itoa(*times), *output}, " "))
		if *times == 0 {
			return UsageError(errOut, "demo ctl greet", "--times 0: want 1 or more")
		}
		if *times == 13 {
			return 3
		}
		return 0
	})
	root.AddCommand(cmd)
	return root, out, errOut, got
}

func boolString(b bool) string {
	if b {
		return "loud"
	}
	return "quiet"
}

func itoa(n int) string { return strings.Repeat("|", n) }

// TestRun: exit statuses, usage errors (one line naming the command), flags anywhere, help.
func TestRun(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		env    map[string]string
		code   int
		got    string // what the command was run with
		stderr string // a prefix of standard error
	}{
		{args: []string{"greet", "bob", "--loud", "-o", "json"}, got: "bob loud | json"},
		{args: []string{"greet", "--times=2", "bob"}, got: "bob quiet || text"},
		{args: []string{"greet", "--times", "13"}, code: 3, got: "quiet ||||||||||||| text"},
		{args: []string{"greet", "--times", "0"}, code: 2, got: "quiet  text", stderr: "demo ctl greet: --times 0: want 1 or more\n"},
		{args: []string{"greet", "-times", "2"}, code: 2, stderr: "demo ctl greet: unknown flag -times: a long flag takes two dashes: --times (see --help)\n"},
		{args: []string{"greet", "-loud"}, code: 2, stderr: "demo ctl greet: unknown flag -loud: a long flag takes two dashes: --loud (see --help)\n"},
		{args: []string{"greet", "--times", "x"}, code: 2, stderr: `demo ctl greet: invalid argument "x" for "--times" flag`},
		{args: []string{"greet", "a", "b"}, code: 2, stderr: "demo ctl greet: accepts at most 1 arg(s), received 2 (see --help)\n"},
		{args: []string{"grete"}, code: 2, stderr: "demo ctl: unknown command \"grete\" (see --help)\n"},
		{args: nil, code: 2, stderr: "Usage: demo ctl <command>\n"},
		// The environment: below the command line, above the default; a bad value names the variable.
		{args: []string{"greet", "--times", "2"}, env: map[string]string{"DEMO_TIMES": "3", "DEMO_LOUD": "true", "DEMO_OUTPUT": "json"}, got: "loud || json"},
		{args: []string{"greet"}, env: map[string]string{"DEMO_TIMES": "many"}, code: 2, stderr: `demo ctl greet: DEMO_TIMES="many": invalid argument "many" for "--times" flag`},
	} {
		root, _, errOut, got := program(t, tt.env)
		code := Run(root, tt.args)
		if code != tt.code || strings.Join(*got, " ") != tt.got || !strings.HasPrefix(errOut.String(), tt.stderr) ||
			tt.stderr == "" && errOut.Len() > 0 || tt.code == 2 && tt.args != nil && strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("%q (env %v): exit %d, ran with %q, stderr %q; want %d, %q, %q", tt.args, tt.env, code, *got, errOut.String(), tt.code, tt.got, tt.stderr)
		}
	}
}

// TestHelp: --help prints the summary, the command's flags (not --help) and, for a command
// that reads the environment, how; exit 0, nothing on stderr, the command not run.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"greet", "--help"}, {"greet", "-h"}, {"help", "greet"}, {"greet", "bob", "--help"}} {
		root, out, errOut, got := program(t, nil)
		code := Run(root, args)
		want := []string{"Usage: demo ctl greet [NAME] [flags]\n\nGreets.\n\nFlags:\n", "      --loud", "  -o, --output string", "      --times int",
			"\nEnvironment:\n", "DEMO_<FLAG>", "(DEMO_OUTPUT=text)"}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%q: no %q in:\n%s", args, w, out.String())
			}
		}
		if code != 0 || errOut.Len() > 0 || len(*got) > 0 || strings.Contains(out.String(), "--help") {
			t.Errorf("%q: exit %d, stderr %q, ran %v, lists --help: %v", args, code, errOut.String(), *got, strings.Contains(out.String(), "--help"))
		}
	}
}
