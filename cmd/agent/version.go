package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

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
