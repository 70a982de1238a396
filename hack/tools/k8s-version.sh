# Sourced by hack/tools/build.sh and hack/kind/node-image.sh: the Kubernetes
# version required by a tools module (k8s_tools_mod, by default the pinned
# hack/tools/kubernetes), and the ldflags that stamp it into every binary
# built from it.
#
# Without the version ldflags the binaries report v0.0.0-master: `kubectl
# version` and /version say so, and a kubelet registers a node whose version
# fails the apiserver's skew checks.
#
# Sets: k8s_version (e.g. v1.37.2) and k8s_ldflags.
k8s_tools_mod=${k8s_tools_mod:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kubernetes}
k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3} $1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' "$k8s_tools_mod"/go.mod | head -n1)
if [[ -z $k8s_version ]]; then
  echo "cannot read the k8s.io/kubernetes version from $k8s_tools_mod/go.mod" >&2
  exit 1
fi
k8s_major=${k8s_version#v}; k8s_major=${k8s_major%%.*}
k8s_minor=${k8s_version#v*.}; k8s_minor=${k8s_minor%%.*}
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$k8s_major -X $pkg.gitMinor=$k8s_minor"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
