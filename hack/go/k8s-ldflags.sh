# Sourced by the scripts that build from hack/go/k8s: sets k8s_version (the pinned
# k8s.io/kubernetes) and ldflags (the version stamps, so /version and the kubelet report it).
k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/go/k8s/go.mod")
minor=${k8s_version#v1.}; minor=${minor%%.*}
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
