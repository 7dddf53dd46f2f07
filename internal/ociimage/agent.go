package ociimage

// AgentStage is the folder, relative to the repository root, where `make image` stages what
// goes into the agent's image, and what the Dockerfile copies from: the binary cross-built for
// each architecture (AgentStage/linux_ARCH/reconscope-agent) and the build machine's CA bundle
// (AgentStage/ca-certificates.crt, from Debian's ca-certificates).
const AgentStage = "bin/image"

// Agent is the spec of reconscope-agent's image, built by `make image` (mkimage --spec agent)
// and described by the Dockerfile: a static binary and the CA certificates, nothing else (no
// shell, no package manager, nothing writable, no base image). The agent runs as UID 0: the
// DaemonSet drops every capability and adds four back, and Kubernetes puts added capabilities
// in the effective set of a UID 0 process only (see deploy/daemonset.yaml). Ref is the
// Makefile's default; `make image IMAGE=...` names another.
var Agent = Spec{
	Ref:       "ghcr.io/reconscope/reconscope-agent:dev",
	Platforms: []string{"linux/amd64", "linux/arm64"},
	Files: []File{
		{Source: AgentStage + "/linux_" + ArchPlaceholder + "/reconscope-agent", Dest: "/reconscope-agent", Mode: 0o555},
		// Go's crypto/x509 reads this path first on Linux: OTLP over TLS needs no SSL_CERT_FILE.
		{Source: AgentStage + "/ca-certificates.crt", Dest: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o444},
	},
	Entrypoint: []string{"/reconscope-agent"},
	Cmd:        []string{"run"},
	User:       "0",
}

// Specs are the built-in specs mkimage --spec names.
var Specs = map[string]Spec{"agent": Agent}
