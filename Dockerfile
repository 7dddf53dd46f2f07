# syntax=docker/dockerfile:1
#
# Image of the reconscope agent (deploy/daemonset.yaml runs it as "/reconscope-agent run"), for
# people who build and push with Docker/buildx. It is the image `make image` builds without a
# container engine (internal/ociimage.Agent is its spec; a test checks that this file and the
# spec name the same files, modes, entrypoint, command and user):
#
#   make image IMAGE_ARCHS="amd64 arm64"     # stages bin/image/ (the binaries and CA bundle)
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/reconscope-agent:TAG --push .
#
# No base image, so nothing to pin: the agent is a static Go binary (cilium/ebpf, no cgo,
# committed eBPF objects: no clang), cross-compiled by `make image` for each architecture, and
# the only other file is the CA bundle from the build machine's Debian ca-certificates (for
# OTLP over TLS; Go reads this path first). No shell, no package manager, nothing writable
# (the DaemonSet also sets readOnlyRootFilesystem).
FROM scratch
ARG TARGETARCH
COPY --chmod=0555 bin/image/linux_${TARGETARCH}/reconscope-agent /reconscope-agent
COPY --chmod=0444 bin/image/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# UID 0, not a non-root user: the agent needs the capabilities the DaemonSet adds (BPF,
# PERFMON, SYS_PTRACE, DAC_READ_SEARCH), and Kubernetes puts added capabilities in
# the effective set of a UID 0 process only; a non-root process would hold them in its bounding
# set and could not use them. Every other capability is dropped and the root filesystem is
# read-only: see the comments in deploy/daemonset.yaml.
USER 0
ENTRYPOINT ["/reconscope-agent"]
CMD ["run"]
