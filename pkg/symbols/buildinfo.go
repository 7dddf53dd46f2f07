package symbols

// The build information the Go linker writes into .go.buildinfo: the Go version, the main
// module, the module versions and build settings, and the version of a Kubernetes release
// build's staging modules, read from its ldflags.

import (
	"debug/buildinfo"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
)

const buildInfoMagic = "\xff Go buildinf:"

// readBuildInfo fills GoVersion, MainModule, Modules and Settings from .go.buildinfo.
func (b *Binary) readBuildInfo() error {
	b.Modules = map[string]string{}
	b.Settings = map[string]string{}
	bi, err := b.parseBuildInfo()
	if err != nil || bi == nil {
		return err
	}
	b.GoVersion = bi.GoVersion
	b.goMinor = goMinor(bi.GoVersion)
	b.MainModule = bi.Main.Path
	b.MainVersion = bi.Main.Version
	if b.MainModule == "" {
		b.MainModule = bi.Path
	}
	for _, s := range bi.Settings {
		b.Settings[s.Key] = s.Value
	}
	staging := stagingVersion(b.Settings["-ldflags"])
	for _, d := range bi.Deps {
		v := d.Version
		if d.Replace != nil && d.Replace.Version != "" {
			v = d.Replace.Version
		}
		if v == "v0.0.0" && staging != "" && strings.HasPrefix(d.Path, "k8s.io/") {
			v = staging
		}
		b.Modules[d.Path] = v
	}
	return nil
}

// stagingVersion returns the published version of the staging modules (client-go,
// apimachinery, ...) of a Kubernetes release build: such a build replaces them by directories
// of the kubernetes tree, recorded as v0.0.0, and sets its release in the linker flags, whose
// v1.37.2 ships client-go v0.37.2. "" when the linker flags set no Kubernetes release.
func stagingVersion(ldflags string) string {
	v := kubernetesVersion(ldflags)
	if v == "" {
		return ""
	}
	return "v0." + strings.TrimPrefix(v, "v1.")
}

// kubernetesVersion returns the release set by -X k8s.io/component-base/version.gitVersion
// (or k8s.io/client-go/pkg/version.gitVersion) in the linker flags, as "v1.MINOR.PATCH"
// without pre-release or build suffixes; "" when there is none.
func kubernetesVersion(ldflags string) string {
	for _, key := range []string{"k8s.io/component-base/version.gitVersion=", "k8s.io/client-go/pkg/version.gitVersion="} {
		i := strings.Index(ldflags, key)
		if i < 0 {
			continue
		}
		v := strings.Trim(ldflags[i+len(key):], "'\"")
		if j := strings.IndexAny(v, " '\"+-"); j >= 0 {
			v = v[:j]
		}
		parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
		if len(parts) != 3 || parts[0] != "1" {
			continue
		}
		if _, err := strconv.Atoi(parts[1]); err != nil {
			continue
		}
		if _, err := strconv.Atoi(parts[2]); err != nil {
			continue
		}
		return "v1." + parts[1] + "." + parts[2]
	}
	return ""
}

// ModuleVersion returns the version of module in this binary: a dependency's (after
// replace directives), or the main module's own when the binary was built in that module
// (a program inside controller-runtime's module, for example): "(devel)" when the build
// recorded none. ok is false when the binary does not contain the module.
func (b *Binary) ModuleVersion(module string) (version string, ok bool) {
	if v, ok := b.Modules[module]; ok {
		return v, true
	}
	if module != "" && module == b.MainModule {
		if b.MainVersion == "" {
			return "(devel)", true
		}
		return b.MainVersion, true
	}
	return "", false
}

// parseBuildInfo decodes .go.buildinfo. It returns nil, nil when there is none: Go-ness was
// then established from .gopclntab and the version stays unknown.
func (b *Binary) parseBuildInfo() (*debug.BuildInfo, error) {
	s := b.f.Section(".go.buildinfo")
	if s == nil || s.Type == elf.SHT_NOBITS {
		// No section (an unusual linker): let debug/buildinfo search the data segment.
		bi, err := buildinfo.Read(b.r)
		if err != nil {
			return nil, nil
		}
		return bi, nil
	}
	if s.Size > 16<<20 {
		return nil, fmt.Errorf("%w: .go.buildinfo is %d bytes", ErrTruncated, s.Size)
	}
	data, err := b.sectionBytes(s)
	if err != nil {
		return nil, err
	}
	if len(data) < 32 || string(data[:14]) != buildInfoMagic {
		return nil, nil
	}
	var vers, mod string
	flags := data[15]
	if flags&2 != 0 {
		// Go 1.18+: two varint-prefixed strings follow the 32-byte header.
		rest := data[32:]
		readStr := func() (string, bool) {
			l, n := binary.Uvarint(rest)
			if n <= 0 || l > uint64(len(rest)-n) {
				return "", false
			}
			str := string(rest[n : n+int(l)])
			rest = rest[n+int(l):]
			return str, true
		}
		var ok bool
		if vers, ok = readStr(); !ok {
			return nil, fmt.Errorf("%w: malformed .go.buildinfo", ErrTruncated)
		}
		mod, _ = readStr()
	} else {
		// Go 1.17 and older: pointers to Go strings.
		if data[14] != 8 {
			return nil, nil
		}
		vers = b.readGoString(binary.LittleEndian.Uint64(data[16:]))
		mod = b.readGoString(binary.LittleEndian.Uint64(data[24:]))
	}
	if vers == "" {
		return nil, nil
	}
	if len(mod) >= 33 && mod[len(mod)-17] == '\n' {
		mod = mod[16 : len(mod)-16] // strip the framing sentinels
	} else {
		mod = ""
	}
	bi, err := debug.ParseBuildInfo(mod)
	if err != nil {
		// Module information is a bonus; the program can be traced without it.
		bi = &debug.BuildInfo{}
	}
	bi.GoVersion = vers
	return bi, nil
}

// readGoString reads a Go string header {ptr, len} at addr and the bytes it points to.
func (b *Binary) readGoString(addr uint64) string {
	hdr, err := b.readVA(addr, 16)
	if err != nil {
		return ""
	}
	p, l := binary.LittleEndian.Uint64(hdr), binary.LittleEndian.Uint64(hdr[8:])
	if l > 1<<20 {
		return ""
	}
	s, err := b.readVA(p, l)
	if err != nil {
		return ""
	}
	return string(s)
}

// goMinor returns 26 for "go1.26.8", "go1.26rc1" or "devel go1.26-abcdef"; 0 if unknown.
func goMinor(v string) int {
	i := strings.Index(v, "go1.")
	if i < 0 {
		return 0
	}
	v = v[i+4:]
	j := 0
	for j < len(v) && v[j] >= '0' && v[j] <= '9' {
		j++
	}
	n, err := strconv.Atoi(v[:j])
	if err != nil {
		return 0
	}
	return n
}
