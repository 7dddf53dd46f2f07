package ociimage_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/reconscope/reconscope/internal/ociimage"
)

// instruction is one Dockerfile instruction: its keyword, upper-cased, and its arguments.
type instruction struct {
	cmd  string
	args string
	line int
}

// parseDockerfile splits a Dockerfile into instructions, joining continuation lines and
// dropping comments and the parser directives.
func parseDockerfile(t *testing.T, text string) []instruction {
	t.Helper()
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start})
		cur.Reset()
	}
	if cur.Len() > 0 {
		t.Fatalf("Dockerfile ends in a continuation line: %q", cur.String())
	}
	return out
}

func jsonArray(t *testing.T, in instruction) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		t.Errorf("Dockerfile:%d: %s %s: want the exec (JSON array) form: %v", in.line, in.cmd, in.args, err)
	}
	return v
}

// TestDockerfileDescribesAgentImage: the Dockerfile builds the image `make image` builds
// (ociimage.Agent): the same files from the same staged sources with the same modes, the same
// entrypoint, command and user, no base image, and nothing else.
func TestDockerfileDescribesAgentImage(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	spec := ociimage.Agent
	var (
		froms            []string
		files            []ociimage.File
		entrypoint, cmds []string
		user             string
		seen             = map[string]int{}
	)
	for _, in := range parseDockerfile(t, string(b)) {
		seen[in.cmd]++
		switch in.cmd {
		case "FROM":
			froms = append(froms, in.args)
		case "ARG":
			if in.args != "TARGETARCH" {
				t.Errorf("Dockerfile:%d: ARG %s: only TARGETARCH is expected", in.line, in.args)
			}
		case "COPY":
			fields := strings.Fields(in.args)
			var mode fs.FileMode
			for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
				flag, value, _ := strings.Cut(fields[0], "=")
				if flag != "--chmod" {
					t.Errorf("Dockerfile:%d: COPY %s: unexpected flag", in.line, fields[0])
				}
				m, err := strconv.ParseUint(value, 8, 32)
				if err != nil {
					t.Errorf("Dockerfile:%d: --chmod=%s: %v", in.line, value, err)
				}
				mode = fs.FileMode(m)
				fields = fields[1:]
			}
			if len(fields) != 2 {
				t.Errorf("Dockerfile:%d: COPY %s: want one source and one destination", in.line, in.args)
				continue
			}
			files = append(files, ociimage.File{
				Source: strings.ReplaceAll(fields[0], "${TARGETARCH}", ociimage.ArchPlaceholder),
				Dest:   fields[1], Mode: mode,
			})
		case "ENTRYPOINT":
			entrypoint = jsonArray(t, in)
		case "CMD":
			cmds = jsonArray(t, in)
		case "USER":
			user = in.args
		default:
			// RUN would need a shell; ENV, WORKDIR, ADD, VOLUME... are not in the spec.
			t.Errorf("Dockerfile:%d: %s: not part of the agent's image spec", in.line, in.cmd)
		}
	}
	for _, k := range []string{"ENTRYPOINT", "CMD", "USER"} {
		if seen[k] != 1 {
			t.Errorf("Dockerfile has %d %s instructions, want 1", seen[k], k)
		}
	}
	if !slices.Equal(froms, []string{"scratch"}) {
		t.Errorf("FROM %q, want one stage FROM scratch (no base image to pin)", froms)
	}
	if !slices.Equal(files, spec.Files) {
		t.Errorf("Dockerfile copies %+v\nmake image's spec has %+v", files, spec.Files)
	}
	if !slices.Equal(entrypoint, spec.Entrypoint) || !slices.Equal(cmds, spec.Cmd) || user != spec.User {
		t.Errorf("Dockerfile: entrypoint %q cmd %q user %q; spec: %q %q %q", entrypoint, cmds, user, spec.Entrypoint, spec.Cmd, spec.User)
	}
	if len(spec.Env) != 0 || spec.WorkingDir != "" {
		t.Errorf("spec has env %q / workdir %q, which the Dockerfile does not set", spec.Env, spec.WorkingDir)
	}

	// make image stages exactly the sources the spec (and so the Dockerfile) copies, and
	// .dockerignore lets them through to the builder.
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range spec.Files {
		src := strings.ReplaceAll(f.Source, ociimage.ArchPlaceholder, "$$arch")
		if !strings.Contains(string(mk), "-o "+src+" ") && !strings.Contains(string(mk), " "+src+"\n") {
			t.Errorf("Makefile's image target does not stage %s", src)
		}
		if !strings.HasPrefix(f.Source, ociimage.AgentStage+"/") {
			t.Errorf("%s is not under %s", f.Source, ociimage.AgentStage)
		}
	}
	if !strings.Contains(string(mk), "--spec agent") {
		t.Error("Makefile's image target does not build --spec agent")
	}
	ignore, err := os.ReadFile(filepath.Join("../../.dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Split(string(ignore), "\n"), "!"+ociimage.AgentStage+"/") {
		t.Errorf(".dockerignore does not re-include %s/", ociimage.AgentStage)
	}
}
