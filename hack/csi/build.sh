#!/usr/bin/env bash
# Builds the CSI attach path for the real nodes into a cache keyed by its inputs; a second
# run builds nothing. Prints the directory holding csi-attacher and csi-mock.
# - csi-attacher: the CSI external-attacher. Its go.mod has replace directives, so
#   `go install …@version` refuses: build it inside a copy of its own module directory.
# - csi-mock: Kubernetes' own mock CSI driver plus the kubelet plugin registration
#   (hack/csi/mockdriver/main.go), in a copy of the wrapper module hack/go/k8s so it
#   shares the kubelet's pinned versions and Go build cache.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
attacher_version=v4.13.0
k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/go/k8s/go.mod")
key=$(cat "$here/csi/mockdriver/main.go" "$here/go/k8s/go.mod" | sha256sum | cut -c1-12)
cache=${NODEAGENT_CSI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/csi}
out="$cache/attacher-$attacher_version-k8s-$k8s_version-$key"
if [ -x "$out/csi-attacher" ] && [ -x "$out/csi-mock" ]; then echo "$out"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
work=$(mktemp -d)
trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
mkdir -p "$out.tmp"
echo "building csi-attacher $attacher_version and csi-mock into $out (cold: 5-10 min)" >&2

mkdir "$work/k8s"
cp "$here/go/k8s/go.mod" "$here/go/k8s/go.sum" "$here/csi/mockdriver/main.go" "$work/k8s/"
(cd "$work/k8s" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/csi-mock" .) >&2

mod=github.com/kubernetes-csi/external-attacher/v4
dir=$(cd "$work" && go mod download -json "$mod@$attacher_version" |
  sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "go mod download gave no directory for $mod@$attacher_version" >&2; exit 1; }
cp -r "$dir" "$work/attacher" && chmod -R u+w "$work/attacher"
(cd "$work/attacher" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/csi-attacher" ./cmd/csi-attacher) >&2

rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out"
