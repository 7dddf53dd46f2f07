#!/usr/bin/env bash
# Builds containerd v2 (containerd, ctr, containerd-shim-runc-v2) from the Go module proxy into a
# versioned cache folder outside the repository, for the test bed's node (test/testenv/node.go).
# Skips the build when the stamp file says the binaries are there. Prints the folder on its
# last line. runc is Debian's package; containerd 2.x because kubelet 1.37 wants a runtime that
# answers the RuntimeConfig CRI call (containerd 2.0+) and the 1.x lines are end of life.
set -euo pipefail

CONTAINERD_VERSION=v2.4.2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cache.sh"
cached containerd "containerd-$CONTAINERD_VERSION" "containerd=$CONTAINERD_VERSION"
export CGO_ENABLED=0
pkg=github.com/containerd/containerd/v2
ldflags="-X $pkg/version.Version=$CONTAINERD_VERSION -X $pkg/version.Package=$pkg"
# The tags containerd's Makefile uses for static builds; no_btrfs/no_devmapper/no_zfs: overlayfs
# and native snapshotters only (btrfs needs cgo).
tags="urfave_cli_no_docs osusergo netgo static_build no_btrfs no_devmapper no_zfs"
for cmd in containerd ctr; do
  echo "building $cmd $CONTAINERD_VERSION (cold: a few minutes)" >&2
  (cd "$here/containerd" && go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$out/$cmd" "$pkg/cmd/$cmd")
done
echo "building containerd-shim-runc-v2 $CONTAINERD_VERSION" >&2
(cd "$here/containerd" && go build -trimpath -tags "$tags no_grpc" -ldflags "$ldflags" -o "$out/containerd-shim-runc-v2" "$pkg/cmd/containerd-shim-runc-v2")
built containerd
