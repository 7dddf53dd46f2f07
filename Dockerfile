# syntax=docker/dockerfile:1
#
# Image of the reconscope agent (deploy/daemonset.yaml runs it as "reconscope-agent run").
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     --build-arg VERSION=$(git describe --tags --always) -t REGISTRY/reconscope-agent:TAG .
#
# The build needs no clang: the eBPF objects and their Go bindings are committed (bpf/), and
# the binary is pure Go (cilium/ebpf, no cgo), so it cross-compiles for every platform from the
# builder's own.
#
# Not built in the environment this file was written in (it has no Docker engine); it is kept
# to the same build command as "make build".

# The builder runs on the build machine's platform and cross-compiles for the target's.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Dependencies first, in their own layer, so source edits do not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-X main.version=$VERSION" -o /reconscope-agent ./cmd/agent

# distroless/static, not :nonroot: the agent must run as UID 0 for Kubernetes to give it the
# capabilities the DaemonSet adds (BPF, PERFMON, SYS_PTRACE, DAC_READ_SEARCH, SYS_RESOURCE);
# a non-root process would hold them in its bounding set only. Everything else is dropped and
# the root filesystem is read-only: see the comments in deploy/daemonset.yaml. No shell, no
# package manager; CA certificates and tzdata are included (OTLP over TLS).
FROM gcr.io/distroless/static:latest
COPY --from=build /reconscope-agent /reconscope-agent
ENTRYPOINT ["/reconscope-agent"]
CMD ["run"]
