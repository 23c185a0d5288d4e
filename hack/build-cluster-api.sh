#!/usr/bin/env bash
# Builds Cluster API's core manager from the wrapper module hack/go/cluster-api, cached by
# version, with the CRDs of the same version beside it. Prints the binary's path.
# Cold: about 8 minutes on two busy cores.
set -euo pipefail
python3 "$(dirname "$0")/preflight.py" hack/build-cluster-api.sh "$@"
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '/^require sigs.k8s.io\/cluster-api v/ {print $NF; exit}' "$here/go/cluster-api/go.mod")
cache=${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/cluster-api
out="$cache/$version"
# One build of $out at a time (two runs would move each other's .tmp away): a second
# run waits here, then finds it built.
mkdir -p "$(dirname "$out")" && exec 9>"$out.lock" && flock 9
if [ -x "$out/capi-manager" ]; then echo "$out/capi-manager"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$out.tmp" && mkdir -p "$out.tmp/crds"
echo "building Cluster API's core manager $version into $out (cold: about 8 minutes)" >&2
(cd "$here/go/cluster-api" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/capi-manager" \
  sigs.k8s.io/cluster-api/core) >&2
mod=$(cd "$here/go/cluster-api" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
cp "$mod"/core/config/crd/bases/*.yaml "$out.tmp/crds/"
chmod -R u+w "$out.tmp/crds"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out/capi-manager"
