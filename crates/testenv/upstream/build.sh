#!/usr/bin/env bash
# Builds the upstream control-plane binaries from the Go module proxy into a cache outside the
# repository, keyed by version, and reuses them when present. Prints the bin directory.
#
#   kube-apiserver kube-controller-manager kube-scheduler kubectl   (k8s.io/kubernetes wrapper module)
#   etcd                                                            (go.etcd.io/etcd/server/v3 wrapper)
#   kwok kwokctl                                                    (sigs.k8s.io/kwok, go install)
#
# Wrapper go.mod/go.sum files are committed beside this script (k8s/, etcd/); if one is missing
# it is generated from the upstream tag's own go.mod (see ../../../docs/testenv.md).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$HERE/versions.env"
GOVER=$(go env GOVERSION)
CACHE=${FLOTILLA_CACHE:-$HOME/.cache/flotilla}
BIN=${FLOTILLA_TESTENV_BIN:-$CACHE/testenv/bin/k8s-$KUBERNETES-etcd-$ETCD-kwok-$KWOK-$GOVER}
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
log() { printf '[testenv-build] %s\n' "$*" >&2; }
mkdir -p "$BIN"

build_k8s() {
  local staging="v0.${KUBERNETES#v1.}" minor="${KUBERNETES#v1.}"; minor=${minor%%.*}
  local mod="$HERE/k8s"
  if [ ! -f "$mod/go.mod" ]; then
    log "generating k8s wrapper go.mod for $KUBERNETES"
    mkdir -p "$mod"; (cd "$mod"
      go mod init testenv.local/k8s-bin >/dev/null 2>&1
      local json gomod
      if ! json=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES"); then
        log "cannot download k8s.io/kubernetes@$KUBERNETES: $json"; exit 1
      fi
      gomod=$(printf '%s\n' "$json" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
      local gov; gov=$(sed -nE 's/^go ([0-9.]+)$/\1/p' "$gomod")
      go mod edit -go="$gov"
      local gd; gd=$(sed -nE 's/^godebug (default=go[0-9.]+)$/\1/p' "$gomod")
      [ -z "$gd" ] || go mod edit -godebug="$gd"
      for m in $(sed -nE 's#^\s*(k8s\.io/[a-z0-9-]+) v0\.0\.0( // indirect)?$#\1#p' "$gomod"); do
        go mod edit -replace="$m=$m@$staging"
      done
      go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$KUBERNETES" \
        "k8s.io/kubernetes/cmd/kube-controller-manager@$KUBERNETES" \
        "k8s.io/kubernetes/cmd/kube-scheduler@$KUBERNETES" \
        "k8s.io/kubernetes/cmd/kubectl@$KUBERNETES" >&2
      go mod tidy >&2)
  fi
  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X '$p.gitVersion=$KUBERNETES' -X '$p.gitMajor=1' -X '$p.gitMinor=$minor'"
    ld+=" -X '$p.gitTreeState=clean' -X '$p.buildDate=1970-01-01T00:00:00Z'"
  done
  log "building kube-apiserver kube-controller-manager kube-scheduler kubectl $KUBERNETES"
  local tmp; tmp=$(mktemp -d "$BIN/.tmp-k8s.XXXXXX")
  (cd "$mod" && go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags="all=$ld" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
  mv "$tmp"/* "$BIN/" && rmdir "$tmp"
}

build_etcd() {
  local mod="$HERE/etcd"
  if [ ! -f "$mod/go.mod" ]; then
    log "generating etcd wrapper go.mod for $ETCD"
    mkdir -p "$mod"; (cd "$mod"
      go mod init testenv.local/etcd-bin >/dev/null 2>&1
      go get -tool "go.etcd.io/etcd/server/v3@$ETCD" >&2
      go mod tidy >&2)
  fi
  log "building etcd $ETCD"
  local tmp; tmp=$(mktemp -d "$BIN/.tmp-etcd.XXXXXX")
  (cd "$mod" && go build -trimpath -ldflags="-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3)
  mv "$tmp/etcd" "$BIN/etcd" && rmdir "$tmp"
}

build_kwok() {
  log "building kwok kwokctl $KWOK"
  local tmp; tmp=$(mktemp -d "$BIN/.tmp-kwok.XXXXXX")
  GOBIN="$tmp" GOFLAGS= go install -trimpath -ldflags="-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$KWOK" "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK"
  mv "$tmp"/* "$BIN/" && rmdir "$tmp"
  # kwok has no built-in stages; keep the upstream stage files next to the binaries.
  local stages; stages="$(go env GOMODCACHE)/sigs.k8s.io/kwok@$KWOK/kustomize/stage"
  rm -rf "$BIN/stages"; cp -r "$stages" "$BIN/stages"; chmod -R u+w "$BIN/stages"
}

have() { for f in "$@"; do [ -x "$BIN/$f" ] || return 1; done; }
# Several test processes can ask for the binaries at once (each plane directory starts its own
# plane): one builds while the others wait on this lock, then find the binaries. Each build also
# writes into a temporary directory of its own, so a builder without the lock (an older copy of
# this script) cannot take or clobber its half-built files.
exec 9>"$BIN/.build.lock"
flock 9
trap 'log "FAILED (line $LINENO): see the output above"' ERR
start=$(date +%s)
have etcd || build_etcd
have kwok kwokctl && [ -d "$BIN/stages" ] || build_kwok
have kube-apiserver kube-controller-manager kube-scheduler kubectl || build_k8s
log "binaries ready in $BIN ($(( $(date +%s) - start ))s)"
echo "$BIN"
