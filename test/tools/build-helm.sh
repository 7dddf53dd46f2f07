#!/usr/bin/env bash
# Builds Helm (helm.sh/helm/v3, the version test/tools/helm/go.mod requires) from the Go module
# proxy into a versioned cache folder outside the repository, for `make chart-check` and the
# chart tests. Skips the build when the binary is already there. Prints its path on the last
# line.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=$(cd "$here/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v3)
cache=${RECONSCOPE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/reconscope}
out="$cache/helm-$version"

if [[ -x "$out/helm" ]]; then
  echo "helm $version is cached" >&2
  echo "$out/helm"
  exit 0
fi
mkdir -p "$out"
start=$(date +%s)
echo "building helm $version (cold: a few minutes)" >&2
(cd "$here/helm" && CGO_ENABLED=0 go build -trimpath \
  -ldflags "-X helm.sh/helm/v3/internal/version.version=$version" \
  -o "$out/helm.tmp" helm.sh/helm/v3/cmd/helm)
mv "$out/helm.tmp" "$out/helm"
echo "helm built in $(( $(date +%s) - start ))s" >&2
echo "$out/helm"
