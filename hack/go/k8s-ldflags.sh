# Sourced by the scripts that build from the Kubernetes wrapper modules: sets k8s_version,
# k8s_dir (its wrapper module) and ldflags (the version stamps, so /version and the kubelet
# report it). The default release is the one hack/go/k8s pins; NODEAGENT_K8S_VERSION (or the
# script's first argument) picks another, from its own committed module hack/go/k8s-vX.Y.Z.
k8s_default=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/go/k8s/go.mod")
k8s_version=${1:-${NODEAGENT_K8S_VERSION:-$k8s_default}}
k8s_version=v${k8s_version#v}
if [ "$k8s_version" = "$k8s_default" ]; then
  k8s_dir="$here/go/k8s"
else
  k8s_dir="$here/go/k8s-$k8s_version"
  if [ ! -f "$k8s_dir/go.mod" ]; then
    echo "no wrapper module for Kubernetes $k8s_version (hack/go/k8s-$k8s_version): write it with hack/go/new-k8s-wrapper.sh $k8s_version" >&2
    exit 2
  fi
fi
minor=${k8s_version#v1.}; minor=${minor%%.*}
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
