#!/usr/bin/env bash
# Builds Karpenter's kwok provider (the real Karpenter controllers with a cloud provider that
# creates Node objects) from the wrapper module hack/go/karpenter, cached by version. Prints
# the binary's path. Karpenter v1.15.0 needs go >= 1.26.9: the toolchain comes from the Go
# module proxy (GOTOOLCHAIN=go1.27.3). Cold: about 3.5 minutes on two busy cores.
set -euo pipefail
python3 "$(dirname "$0")/preflight.py" hack/build-karpenter.sh "$@"
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '/^require sigs.k8s.io\/karpenter v/ {print $NF; exit}' "$here/go/karpenter/go.mod")
cache=${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/karpenter
out="$cache/$version"
# One build of $out at a time (two runs would move each other's .tmp away): a second
# run waits here, then finds it built.
mkdir -p "$(dirname "$out")" && exec 9>"$out.lock" && flock 9
if [ -x "$out/karpenter-kwok" ]; then echo "$out/karpenter-kwok"; exit 0; fi

export GOTOOLCHAIN=go1.27.3 CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
echo "building Karpenter (kwok provider) $version into $out (cold: about 3.5 minutes)" >&2
(cd "$here/go/karpenter" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/karpenter-kwok" \
  sigs.k8s.io/karpenter/kwok) >&2
# Its CRDs, from the same module version, beside the binary.
mod=$(cd "$here/go/karpenter" && go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
mkdir -p "$out.tmp/crds"
cp "$mod"/pkg/apis/crds/*.yaml "$mod"/kwok/apis/crds/*.yaml "$out.tmp/crds/"
chmod -R u+w "$out.tmp/crds"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out/karpenter-kwok"
