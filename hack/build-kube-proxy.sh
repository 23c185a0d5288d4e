#!/usr/bin/env bash
# Builds kube-proxy for the departure benchmark's client namespace (hack/realnode/traffic.py)
# from the same wrapper module and version stamps as the kubelet (hack/build-kubelet.sh),
# cached by version. Prints the binary's path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The node's release: NODEAGENT_KUBELET_VERSION, else the control plane's (a skewed pair runs
# an older kubelet against a newer API server).
NODEAGENT_K8S_VERSION=${NODEAGENT_KUBELET_VERSION:-${NODEAGENT_K8S_VERSION:-}}
# shellcheck source=go/k8s-ldflags.sh
. "$here/go/k8s-ldflags.sh"
cache=${NODEAGENT_KUBE_PROXY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/kube-proxy}
out="$cache/$k8s_version"
# One build of $out at a time (two runs would move each other's .tmp away): a second
# run waits here, then finds it built.
mkdir -p "$(dirname "$out")" && exec 9>"$out.lock" && flock 9
if [ -x "$out/kube-proxy" ]; then echo "$out/kube-proxy"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
echo "building kube-proxy $k8s_version into $out (after the kubelet: 1-3 min)" >&2
(cd "$k8s_dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp/kube-proxy" \
  k8s.io/kubernetes/cmd/kube-proxy) >&2
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out/kube-proxy"
