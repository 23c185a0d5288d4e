#!/usr/bin/env bash
# Writes the wrapper module for one Kubernetes release, hack/go/k8s-vX.Y.Z, from that
# release's own go.mod: k8s.io/kubernetes replaces its staging modules with ./staging
# paths, which only count in the main module, so each is mapped to its published tag
# (v0.Y.Z). Run once per release; the result (go.mod, go.sum) is committed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=${1:?usage: hack/go/new-k8s-wrapper.sh vX.Y.Z}
[[ $version =~ ^v1\.[0-9]+\.[0-9]+$ ]] || { echo "not a release version: $version" >&2; exit 2; }
staging_tag=v0.${version#v1.}
dir="$here/k8s-$version"
mod=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" |
  awk -F'"' '$2 == "GoMod" {print $4}')
go_line=$(awk '$1 == "go" {print; exit}' "$mod")
godebug_line=$(awk '$1 == "godebug" {print; exit}' "$mod")
mkdir -p "$dir"
{
  echo "// Wrapper module: builds Kubernetes $version from the Go module proxy"
  echo "// (hack/go/new-k8s-wrapper.sh wrote it; the build scripts take NODEAGENT_K8S_VERSION)."
  echo "module nodeagent.local/hack/cluster/k8s"
  echo
  echo "$go_line"
  echo
  [ -n "$godebug_line" ] && { echo "$godebug_line"; echo; }
  echo "require k8s.io/kubernetes $version"
  echo
  echo "replace ("
  awk -v tag="$staging_tag" '$2 == "=>" && $3 ~ /^\.\/staging\// {print "\t" $1 " => " $1 " " tag}' "$mod" | sort -u
  echo ")"
} >"$dir/go.mod"
cp "$here/k8s/tools.go" "$dir/tools.go"
(cd "$dir" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod tidy)
echo "$dir"
