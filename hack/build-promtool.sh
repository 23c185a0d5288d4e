#!/usr/bin/env bash
# Builds promtool (the chart's alerting rules are unit-tested with `promtool test rules`) and
# promql-names (the metric names PromQL expressions select, read by Prometheus' own parser)
# from the Go module proxy, through the wrapper module hack/go/prometheus, into a cache keyed
# by its go.sum; a second run builds nothing. Prints the directory holding both on stdout.
set -euo pipefail
python3 "$(dirname "$0")/preflight.py" hack/build-promtool.sh "$@"
here=$(cd "$(dirname "$0")" && pwd)
module="$here/go/prometheus"
version=$(awk '$1 == "require" && $2 == "github.com/prometheus/prometheus" {print $3}' "$module/go.mod")
key=$(cat "$0" "$module/go.sum" "$module/promql-names/main.go" | sha256sum | cut -c1-12)
out=${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent/promtool-$version-$key
# One build of $out at a time (two runs would move each other's .tmp away): a second
# run waits here, then finds it built.
mkdir -p "$(dirname "$out")" && exec 9>"$out.lock" && flock 9
if [ -x "$out/promtool" ] && [ -x "$out/promql-names" ]; then echo "$out"; exit 0; fi

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
echo "building promtool $version into $out (cold: about 3 minutes)" >&2
# Prometheus 3.x's module versions are v0.3MM.P for release 3.MM.P; stamped as a release's.
IFS=. read -r _ minor patch <<<"${version#v}"
release="3.$((minor - 300)).$patch"
pkg=github.com/prometheus/common/version
ldflags="-s -w -X $pkg.Version=$release -X $pkg.Branch=HEAD -X $pkg.BuildUser=nodeagent"
mkdir -p "$out.tmp"
# remove_all_sd (Prometheus' README) leaves out the cloud service discoveries, which only
# `promtool check service-discovery` uses: the cold build takes 3 minutes instead of 7.
(cd "$module" && go build -trimpath -tags remove_all_sd -ldflags "$ldflags" -o "$out.tmp/" \
  github.com/prometheus/prometheus/cmd/promtool ./promql-names) >&2
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out"
