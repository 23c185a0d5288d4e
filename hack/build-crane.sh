#!/usr/bin/env bash
# Builds crane (go-containerregistry) from the wrapper module hack/go/crane, cached by
# version: `crane registry serve` is the OCI registry the release tests start on loopback
# (tests/test_release.py), `crane push` pushes hack/release's image index. Prints the
# binary's path.
set -euo pipefail
python3 "$(dirname "$0")/preflight.py" hack/build-crane.sh "$@"
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '$1 == "require" && $2 == "github.com/google/go-containerregistry" {print $3}' "$here/go/crane/go.mod")
cache=${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/crane
out="$cache/$version"
# One build of $out at a time (two runs would move each other's .tmp away): a second
# run waits here, then finds it built.
mkdir -p "$(dirname "$out")" && exec 9>"$out.lock" && flock 9
if [ -x "$out/crane" ]; then echo "$out/crane"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
echo "building crane $version into $out (under a minute)" >&2
# Without the version crane reports "(devel)".
(cd "$here/go/crane" && go build -trimpath \
  -ldflags "-s -w -X github.com/google/go-containerregistry/cmd/crane/cmd.Version=$version" \
  -o "$out.tmp/crane" github.com/google/go-containerregistry/cmd/crane) >&2
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out/crane"
