#!/usr/bin/env bash
# Builds helm from the Go module proxy into a cache keyed by version (a second run
# builds nothing) and fetches the prometheus-operator CRDs from that project's Go
# module, so the chart's ServiceMonitor/PodMonitor/PrometheusRule can be checked by
# a real API server. Prints the helm binary's path on stdout.
set -euo pipefail
python3 "$(dirname "$0")/preflight.py" hack/build-helm.sh "$@"
helm_version=v3.22.0
promop_version=v0.85.0
# The local control plane's minor version (hack/go/k8s/go.mod): helm's default capabilities.
k8s_minor=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$(dirname "$0")/go/k8s/go.mod" | cut -d. -f2)
cache=${XDG_CACHE_HOME:-$HOME/.cache}/nodeagent
out="$cache/helm-$helm_version-k8s-1.$k8s_minor"
# One build of $out at a time (two runs would move each other's .tmp away): a second
# run waits here, then finds it built.
mkdir -p "$(dirname "$out")" && exec 9>"$out.lock" && flock 9
crds="$cache/prometheus-operator-crds-$promop_version"
export GOTOOLCHAIN=local CGO_ENABLED=0

if [ ! -x "$out/helm" ]; then
  echo "building helm $helm_version into $out (cold: a few minutes)" >&2
  # Without these the built helm reports version "v3" and Kubernetes v1.20.
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
  done
  mkdir -p "$out.tmp"
  GOBIN="$out.tmp" go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$helm_version" >&2
  rm -rf "$out" && mv "$out.tmp" "$out"
fi

if [ ! -f "$crds/.complete" ]; then
  echo "fetching prometheus-operator $promop_version CRDs into $crds" >&2
  dir=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@$promop_version" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$crds.tmp"
  for kind in servicemonitors podmonitors prometheusrules; do
    cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$crds.tmp/"
  done
  touch "$crds.tmp/.complete"
  rm -rf "$crds" && mv "$crds.tmp" "$crds"
fi
echo "$out/helm"
