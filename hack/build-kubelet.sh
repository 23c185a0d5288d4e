#!/usr/bin/env bash
# Builds the kubelet for the real test node (hack/realnode) from the same wrapper module
# and version stamps as the control plane (hack/build-control-plane.sh), into its own cache
# keyed by version, so the control plane's cache stays valid. Built after the control plane,
# it reuses the Go build cache for every package they share. Prints the binary's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The node's release: NODEAGENT_KUBELET_VERSION, else the control plane's (a skewed pair runs
# an older kubelet against a newer API server).
NODEAGENT_K8S_VERSION=${NODEAGENT_KUBELET_VERSION:-${NODEAGENT_K8S_VERSION:-}}
# shellcheck source=go/k8s-ldflags.sh
. "$here/go/k8s-ldflags.sh"
cache=${NODEAGENT_KUBELET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/kubelet}
out="$cache/$k8s_version"
# One build of $out at a time (two runs would move each other's .tmp away): a second
# run waits here, then finds it built.
mkdir -p "$(dirname "$out")" && exec 9>"$out.lock" && flock 9
if [ -x "$out/kubelet" ]; then echo "$out/kubelet"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
echo "building the kubelet $k8s_version into $out (after the control plane: 1-3 min)" >&2
(cd "$k8s_dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp/kubelet" \
  k8s.io/kubernetes/cmd/kubelet) >&2
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out/kubelet"
