package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/reconscope/reconscope/internal/cli"
	"github.com/reconscope/reconscope/pkg/exporter"
)

// version may be set by the build (-ldflags "-X main.version=v1.2.3"); when it is not, the
// version comes from the build information Go embeds in every binary.
var version = ""

// readBuildInfo is debug.ReadBuildInfo; tests replace it.
var readBuildInfo = debug.ReadBuildInfo

// agentBuild is what the binary was built from: the main module's version ("(devel)" for a
// build from a work tree, v1.2.3 for 'go install ...@v1.2.3'), the VCS revision and whether
// the tree had uncommitted changes (recorded by 'go build' in a git checkout), the Go
// release. -ldflags "-X main.version=..." overrides the version only.
func agentBuild() exporter.BuildInfo {
	b := exporter.BuildInfo{Version: "unknown", Revision: "unknown", GoVersion: "unknown", GoArch: runtime.GOARCH}
	if bi, ok := readBuildInfo(); ok {
		b.GoVersion = bi.GoVersion
		if v := bi.Main.Version; v != "" {
			b.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "GOARCH":
				b.GoArch = s.Value
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.modified":
				b.Dirty = s.Value == "true"
			}
		}
	}
	if version != "" {
		b.Version = version
	}
	return b
}

// versionLine is what 'reconscope-agent version' prints.
func versionLine() string {
	b := agentBuild()
	dirty := ""
	if b.Dirty {
		dirty = " (dirty)"
	}
	return fmt.Sprintf("reconscope-agent %s revision %s%s %s %s", b.Version, b.Revision, dirty, b.GoVersion, b.GoArch)
}

// VersionSchema names the schema of version -o json.
const VersionSchema = "reconscope.dev/version/v1"

// VersionReport is what 'reconscope-agent version -o json' prints.
type VersionReport struct {
	Schema   string `json:"schema"`
	Version  string `json:"version"`
	Revision string `json:"revision"`
	Dirty    bool   `json:"dirty"`
	Go       string `json:"go"`
	GoArch   string `json:"goarch"`
}

const versionSummary = `Usage: reconscope-agent version [-o text|json]

Prints the version the binary was built from: its module version, VCS revision, "(dirty)" for a
build from a tree with uncommitted changes, Go release and arch. -o json prints them as one
JSON object: schema, version, revision, dirty, go, goarch (docs/json.md, "Schemas").`

func versionCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := newCommand("version", versionSummary)
	output := cmd.Flags().StringP("output", "o", "text", "output format: text or json")
	cli.Complete(cmd, "output", "text", "json")
	cmd.RunE = cli.RunE(func([]string) int {
		switch *output {
		case "text":
			fmt.Fprintln(stdout, versionLine())
		case "json":
			b := agentBuild()
			enc := json.NewEncoder(stdout)
			_ = enc.Encode(VersionReport{Schema: VersionSchema, Version: b.Version, Revision: b.Revision, Dirty: b.Dirty, Go: b.GoVersion, GoArch: b.GoArch})
		default:
			return usageError(stderr, "version", "--output %q: want text or json", *output)
		}
		return 0
	})
	return cmd
}
