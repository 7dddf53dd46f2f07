# reconscope — make help lists the targets.
#
# Tracing needs root (eBPF). Targets that trace run their privileged step through sudo only
# when you are not root and sudo exists; as root they run directly.

GO       ?= go
# The release version: one source, the file VERSION (the chart's appVersion and image tag, and
# deploy/'s image tag, are the same; a deploy/ test checks it). The agent also reports its VCS
# revision and whether the tree was dirty (reconscope_build_info, `reconscope-agent version`).
VERSION  ?= $(shell cat VERSION)
BIN      := bin/reconscope-agent
PLUGIN   := bin/kubectl-reconscope
LDFLAGS  := -X main.version=$(VERSION)
SUDO     := $(shell if [ "$$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then echo "sudo -E env PATH=$$PATH"; fi)
# make test's packages: the two that run longest first (test/integration, cmd/agent: mostly
# waiting on real controllers; test/integration's tests run two at a time, each with a control
# plane of its own), so they start at once instead of one after the other, and the rest run
# beside them (TEST_P packages at a time: 3 made cmd/agent's fault tests flaky). go test keeps
# the order given and lists each package once.
PKGS     := ./test/integration/ ./cmd/agent/ ./...
TEST_P   ?= 2
# kernels `make kernels` boots (SERIES-ARCH, comma-separated), and the file whose table it rewrites.
KERNELS  ?= 6.1-amd64,6.12-amd64,6.1-arm64,6.12-arm64
KERNELS_DOC ?= docs/compatibility.md
# qemu's accelerator for `make kernels`: auto (KVM where a KVM guest is seen to print, else TCG), kvm or tcg.
KERNELS_ACCEL ?= auto
# go test flags for `make test`; RUN=TestName runs one test.
TESTFLAGS ?= -count=1 -timeout 40m
RUN      ?=

.PHONY: help build image release chart-check generate check-generate test e2e bench soak lint demo controlplane fuzz clean kernels compat

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/reconscope-agent and the kubectl plugin bin/kubectl-reconscope (static, no cgo)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/agent
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(PLUGIN) ./cmd/kubectl-reconscope

# make image: the agent's OCI image for every IMAGE_ARCHS, one index in an OCI layout tarball
# (internal/ociimage.Agent is its spec; the Dockerfile describes the same image). Load it with
# `ctr -n k8s.io images import bin/reconscope-agent-image.tar`, or push it with any OCI tool.
IMAGE       ?= ghcr.io/reconscope/reconscope-agent:$(VERSION)
IMAGE_ARCHS ?= amd64 arm64
IMAGE_TAR   := bin/reconscope-agent-image.tar
# Debian's ca-certificates bundle (apt-get install ca-certificates).
CA_BUNDLE   ?= /etc/ssl/certs/ca-certificates.crt

image: ## build the agent's image (amd64+arm64, static, CA certificates, no shell) into bin/reconscope-agent-image.tar
	@[ -s "$(CA_BUNDLE)" ] || { echo "make image: no CA bundle at $(CA_BUNDLE): apt-get install ca-certificates, or set CA_BUNDLE"; exit 1; }
	mkdir -p bin/image
	cp $(CA_BUNDLE) bin/image/ca-certificates.crt
	for arch in $(IMAGE_ARCHS); do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/image/linux_$$arch/reconscope-agent ./cmd/agent || exit 1; \
	done
	$(GO) run ./internal/cmd/mkimage --spec agent --ref $(IMAGE) $(foreach a,$(IMAGE_ARCHS),--platform linux/$(a)) --out $(IMAGE_TAR)

# make release VERSION=vX.Y.Z: the release's artifacts in bin/release, no registry needed
# (internal/cmd/release says what each file is): the image tarball and its digest, the chart
# packaged and rendered with the image by digest, the agent binaries and the kubectl plugin's
# (staged beside the agent's in bin/image, not in the image) with their CycloneDX SBOMs, SHA256SUMS.
RELEASE_DIR ?= bin/release

release: image ## build the release into bin/release: image tarball and digest, chart (.tgz) and manifest by digest, agent and kubectl plugin binaries, SBOMs, SHA256SUMS
	for arch in $(IMAGE_ARCHS); do \
	  CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/image/linux_$$arch/kubectl-reconscope ./cmd/kubectl-reconscope || exit 1; \
	done
	$(GO) run ./internal/cmd/release --version $(VERSION) --image-tar $(IMAGE_TAR) --binaries bin/image --helm "$$(test/tools/build-helm.sh | tail -1)" --out $(RELEASE_DIR)

chart-check: controlplane ## helm lint and template the chart, compare it with deploy/, promtool check and test the alert rules
	$(GO) test -count=1 -run 'Chart|Kustomiz|AlertRules' ./deploy/

generate: ## regenerate the eBPF objects and their Go bindings with bpf2go (needs clang)
	$(GO) generate ./bpf/... ./test/bench/...

check-generate: generate ## fail when the committed eBPF objects differ from make generate's
	@git diff --exit-code --stat -- bpf/ test/bench/ || { echo "committed bpf2go output is stale: run make generate and commit"; exit 1; }

controlplane: ## build (or reuse cached) etcd, kube-apiserver, kube-controller-manager, kubectl
	test/tools/build-controlplane.sh >/dev/null

test: controlplane ## unit and privileged integration tests (real eBPF, real kube-apiserver)
	@[ -z "$(SUDO)" ] || echo "make test: not root: running the tests through sudo (eBPF needs it)"
	$(SUDO) $(GO) test -p $(TEST_P) $(TESTFLAGS) $(if $(RUN),-run '$(RUN)') $(PKGS)

# The tests that need containerd 2, the OpenTelemetry Collector or Jaeger (built from source on
# first use, the heavy third-party builds) are all behind the e2e tag: make test never builds
# them. One package at a time (-p 1): each starts its own control plane, node or backends.
E2E_PKGS := ./test/e2e/... ./test/otlp/ ./test/testenv/

e2e: controlplane ## end-to-end tests (build tag e2e): test/e2e, the collector's tests (test/otlp), the test bed's node
	$(SUDO) $(GO) test -tags e2e -p 1 $(TESTFLAGS) -v $(if $(RUN),-run '$(RUN)') $(E2E_PKGS)

# make bench BENCH_SHORT=1: CI's short run (cost per reconcile and decode only, fewer rounds): it prints
# the comparison with the committed BENCHMARKS.json and writes nothing; it does not fail on the figures.
BENCH_SHORT ?=
bench: $(if $(filter 1,$(BENCH_SHORT)),,controlplane) ## run the benchmarks, rewrite BENCHMARKS.md and BENCHMARKS.json, compare with the committed run (BENCH_SHORT=1: short, writes nothing)
	$(SUDO) env BENCH_SHORT=$(BENCH_SHORT) test/bench/run.sh

soak: ## 1 M traced reconciles (stack growth, GC, panics, 8 workers); rewrites test/soak/RESULT.md (root, ~minutes)
	$(SUDO) env SOAK_RESULT=1 RECONSCOPE_REQUIRE_BPF=1 $(GO) test -tags soak -run '^TestSoak$$' -count=1 -timeout 2h -v ./test/soak/

kernels: ## boot Debian's kernels under qemu, run the guest tests in each, rewrite docs/compatibility.md's table (KERNELS=6.1-amd64 for one; KERNELS_ACCEL=auto|kvm|tcg; root: apt-get)
	@[ -z "$(SUDO)" ] || echo "make kernels: not root: running through sudo (apt-get download, eBPF in the guest)"
	$(SUDO) $(GO) run ./test/kernels -kernels '$(KERNELS)' -accel '$(KERNELS_ACCEL)' $(if $(KERNELS_DOC),-doc $(KERNELS_DOC))

# The controller-runtime releases of the compatibility matrix (test/compat.CRVersions).
COMPAT_CR     := v0.15.3,v0.16.1,v0.17.2,v0.18.5,v0.19.4,v0.20.4,v0.21.0,v0.22.5,v0.23.3,v0.24.1,v0.25.3
COMPAT_REPORT ?= $(or $(RECONSCOPE_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/reconscope)/compat/report.jsonl

compat: controlplane ## Go toolchains x controller-runtime releases, traced (root, slow: builds cached); rewrites docs/compatibility.md's toolchains region
	@mkdir -p $(dir $(COMPAT_REPORT)) && rm -f $(COMPAT_REPORT)
	@status=0; $(SUDO) env RECONSCOPE_REQUIRE_BPF=1 RECONSCOPE_COMPAT_GO=all RECONSCOPE_COMPAT_CR=all RECONSCOPE_COMPAT_REPORT=$(COMPAT_REPORT) \
	  $(GO) test -tags compat -count=1 -timeout 4h -v -run 'TestGoToolchains|TestControllerRuntime|TestStrippedSites|TestMainModuleVersion|TestDevelVersionOneLayout|TestGo127' ./test/compat/ ./pkg/probes/ ./pkg/symbols/ || status=$$?; \
	$(GO) run ./test/compat/docgen -report $(COMPAT_REPORT) -doc docs/compatibility.md -controller-runtime $(COMPAT_CR); exit $$status

fuzz: ## run each fuzz target briefly (FUZZTIME=10s, or a count like 30000x)
	@for t in $$(grep -rhoE '^func (Fuzz[A-Za-z0-9_]+)' --include=*_test.go pkg | sed 's/func //'); do \
	  pkg=$$(grep -rlE "^func $$t\(" --include=*_test.go pkg | head -1 | xargs dirname); \
	  echo "fuzz $$t in ./$$pkg"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $${FUZZTIME:-10s} ./$$pkg || exit 1; \
	done

# Every build tag of this module's files (internal/testkit's TestLintTagsCoverEveryBuildTag
# fails when a file's //go:build names one that is missing here): vet and staticcheck read the
# files behind them too, and test/soak is compiled and linked.
LINT_TAGS := e2e,compat,soak

lint: ## gofmt, go vet and staticcheck with every build tag, and test/soak compiled
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt would change:"; echo "$$out"; exit 1; }
	$(GO) vet -tags $(LINT_TAGS) ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -tags $(LINT_TAGS) ./...
	$(GO) test -tags soak -count=1 -run '^$$' ./test/soak/

demo: build controlplane ## a real controller on a local control plane, traced live (needs root)
	@[ -z "$(SUDO)" ] || echo "make demo: not root: running the traced demo through sudo (eBPF needs it)"
	$(GO) build -o bin/demo ./test/demo
	$(SUDO) bin/demo --agent $(BIN)   # built, not go run: go run exits 1 on Ctrl-C, which make would report as an error

clean: ## remove build output (the control-plane cache stays; see test/tools)
	rm -rf bin
