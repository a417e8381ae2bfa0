#!/usr/bin/env bash
# Builds the real kube-apiserver and etcd from the Go module proxy, into a cache outside the
# repository. Everything comes through `go` (GOPROXY); nothing from release download sites.
#
#   conformance/build.sh            build if needed, print the cache directory
#   KDISPATCH_K8S_CACHE=DIR ...     use DIR instead of ~/.cache/kdispatch/k8s-<version>
#
# The pins live in the wrapper modules' go.mod/go.sum (conformance/kube-apiserver, conformance/etcd).
# A stamp of those files, this script and the Go version decides whether the cached binaries are
# current, so a second run takes well under a second.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

command -v go >/dev/null || { echo "build.sh: 'go' not found (Go >= 1.26 is needed)" >&2; exit 2; }

modver() { (cd "$here/$2" && go list -m -f '{{.Version}}' "$1"); }
k8s_version=$(modver k8s.io/kubernetes kube-apiserver)
etcd_version=$(modver go.etcd.io/etcd/server/v3 etcd)
[[ -n $k8s_version && -n $etcd_version ]] || { echo "build.sh: cannot read the pinned versions" >&2; exit 2; }

cache=${KDISPATCH_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kdispatch/k8s-$k8s_version}
mkdir -p "$cache"

stamp=$( {
    cat "$here/build.sh" "$here"/kube-apiserver/go.{mod,sum} "$here"/etcd/go.{mod,sum}
    go env GOVERSION GOOS GOARCH
} | sha256sum | cut -d' ' -f1)

current() {
    [[ -x $cache/kube-apiserver && -x $cache/etcd && -f $cache/stamp ]] &&
        [[ $(cat "$cache/stamp") == "$stamp" ]]
}

# one build at a time per cache directory
exec 9>"$cache/.lock"
flock 9

if current; then
    echo "$cache"
    exit 0
fi

echo "build.sh: building kube-apiserver $k8s_version and etcd $etcd_version into $cache" >&2
rm -f "$cache/stamp"
start=$SECONDS
export CGO_ENABLED=0

v=k8s.io/component-base/version
cv=k8s.io/client-go/pkg/version
major=${k8s_version#v}; major=${major%%.*}
minor=${k8s_version#v*.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in $v $cv; do
    ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$cache/etcd.tmp" go.etcd.io/etcd/server/v3)
mv -f "$cache/etcd.tmp" "$cache/etcd"
echo "build.sh: etcd built after $((SECONDS - start)) s" >&2

(cd "$here/kube-apiserver" &&
    go build -trimpath -ldflags "$ldflags" -o "$cache/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
mv -f "$cache/kube-apiserver.tmp" "$cache/kube-apiserver"

"$cache/etcd" --version >&2
"$cache/kube-apiserver" --version >&2
echo "$stamp" >"$cache/stamp"
echo "build.sh: done in $((SECONDS - start)) s; sizes: $(du -h "$cache/kube-apiserver" "$cache/etcd" | tr '\t\n' ': ')" >&2
echo "$cache"
