#!/usr/bin/env bash
# Builds amazon-ec2-metadata-mock (AEMM), the EC2 instance metadata mock the cloud-warning
# tests and the spot-interruption benchmark serve on loopback, from the wrapper module
# hack/go/aemm, cached by version. Prints the binary's path.
set -euo pipefail
python3 "$(dirname "$0")/preflight.py" hack/build-aemm.sh "$@"
here=$(cd "$(dirname "$0")" && pwd)
version=$(awk '/amazon-ec2-metadata-mock v/ {print $NF; exit}' "$here/go/aemm/go.mod")
cache=${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/aemm
out="$cache/$version"
# One build of $out at a time (two runs would move each other's .tmp away): a second
# run waits here, then finds it built.
mkdir -p "$(dirname "$out")" && exec 9>"$out.lock" && flock 9
if [ -x "$out/ec2-metadata-mock" ]; then echo "$out/ec2-metadata-mock"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
echo "building amazon-ec2-metadata-mock $version into $out (under a minute)" >&2
(cd "$here/go/aemm" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/ec2-metadata-mock" \
  github.com/aws/amazon-ec2-metadata-mock/cmd/ec2-metadata-mock) >&2
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out/ec2-metadata-mock"
