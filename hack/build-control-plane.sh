#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd (the release
# in hack/go/k8s, or NODEAGENT_K8S_VERSION / the first argument: hack/go/k8s-ldflags.sh)
# from the Go module proxy into a cache keyed by version; a second run builds nothing.
# Prints the directory holding the binaries on stdout.
set -euo pipefail
python3 "$(dirname "$0")/preflight.py" hack/build-control-plane.sh "$@"
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=go/k8s-ldflags.sh
. "$here/go/k8s-ldflags.sh"
etcd_version=$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$here/go/etcd/go.mod")
cache=${NODEAGENT_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/control-plane}
out="$cache/k8s-$k8s_version-etcd-$etcd_version"
# One build of $out at a time (two runs would move each other's .tmp away): a second
# run waits here, then finds it built.
mkdir -p "$(dirname "$out")" && exec 9>"$out.lock" && flock 9
bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd)

complete() { for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if complete; then echo "$out"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$out.tmp"
echo "building Kubernetes $k8s_version and etcd $etcd_version into $out (cold: 10-30 min)" >&2
(cd "$k8s_dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl) >&2
(cd "$here/go/etcd" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3) >&2
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out"
