#!/usr/bin/env bash
# Builds the reconscope test bed's control plane (etcd, kube-apiserver, kube-controller-manager,
# kubectl, kubelet, and a stripped kube-controller-manager as release builds ship it) from the Go module
# proxy into a versioned cache folder outside the repository. Skips the build when the stamp
# file says the binaries are already there. Prints the folder on its last line.
set -euo pipefail

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cache.sh"
cached "control plane" "controlplane-k8s-$K8S_VERSION-etcd-$ETCD_VERSION" \
  "k8s=$K8S_VERSION etcd=$ETCD_VERSION kubelet"
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
ver_flags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ver_flags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
done

export CGO_ENABLED=0
# etcd (its own module) builds beside Kubernetes' four commands, which build in one go command:
# it schedules their shared packages and their four links across the cores, where four
# invocations one after the other leave a core idle during each link.
echo "building etcd $ETCD_VERSION and kube-apiserver, kube-controller-manager, kubectl, kubelet $K8S_VERSION (cold: many minutes)" >&2
(cd "$here/etcd" && go build -trimpath -o "$out/etcd" .) &
etcd_pid=$!
(cd "$here/controlplane" && go build -trimpath -ldflags "$ver_flags" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet)
wait "$etcd_pid"
echo "building stripped kube-controller-manager (-s -w, like release builds)" >&2
(cd "$here/controlplane" && go build -trimpath -ldflags "-s -w $ver_flags" -o "$out/kube-controller-manager-stripped" k8s.io/kubernetes/cmd/kube-controller-manager)
built "control plane"
