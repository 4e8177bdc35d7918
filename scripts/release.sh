#!/usr/bin/env bash
# Release build: static coordd and coordctl binaries for Linux on amd64 and
# arm64, with their version and commit stamped in, and SHA256SUMS.
#
#   git tag v0.4.0 && scripts/release.sh          # dist/coordd_v0.4.0_linux_amd64/{coordd,coordctl}, ...
#   COORDD_RELEASE_PLATFORMS=linux/amd64 scripts/release.sh   # one platform
#   COORDD_RELEASE_DIST=/tmp/out scripts/release.sh           # another output dir
#
# The version is the Go toolchain's, from git: the tag at HEAD (v0.4.0), else
# a pseudo-version (v0.0.0-20261202030000-a5dfa34abcde), with +dirty when the
# work tree has uncommitted changes. `coordd --version` and
# `coordctl version` print it with the commit and its time. A release is
# built from a clean, tagged checkout: the script refuses a dirty tree
# unless COORDD_RELEASE_ALLOW_DIRTY=1.
#
# Reproducible: CGO_ENABLED=0 (no libc: static), -trimpath (no local paths),
# -buildvcs=true (version from git, not the build machine), no build id,
# and the output is the same for the same commit and Go version.
# deploy/packaging_test.go (TestReleaseScript) runs it for the host's
# architecture and checks the version the binaries print.
set -euo pipefail
cd "$(dirname "$0")/.."

platforms=${COORDD_RELEASE_PLATFORMS:-linux/amd64 linux/arm64}
dist=${COORDD_RELEASE_DIST:-dist}

# Untracked files count too: the toolchain marks the build modified for them.
if [ -n "$(git status --porcelain)" ] && [ "${COORDD_RELEASE_ALLOW_DIRTY:-}" != 1 ]; then
  echo "release.sh: the work tree has uncommitted changes or untracked files (commit or remove them, or COORDD_RELEASE_ALLOW_DIRTY=1 for a test build)" >&2
  exit 1
fi

# The version is read back from each build (what debug.ReadBuildInfo, and
# so --version, reports); every platform must have the same.
mkdir -p "$dist"
version=
sums=()
for platform in $platforms; do
  os=${platform%/*} arch=${platform#*/}
  if [ "$os" = "$platform" ] || [ -z "$arch" ]; then
    echo "release.sh: platform $platform: want os/arch, e.g. linux/amd64" >&2
    exit 1
  fi
  tmp=$(mktemp -d "$dist/.build-XXXXXX")
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -buildvcs=true -ldflags='-s -w -buildid=' \
    -o "$tmp/" ./cmd/coordd ./cmd/coordctl
  chmod 0755 "$tmp"
  v=$(go version -m "$tmp/coordd" | awk '$1 == "mod" && $2 == "github.com/coordd/coordd" { print $3 }')
  if ! go version -m "$tmp/coordd" | grep -q 'vcs.revision='; then
    # The Go toolchain stamps nothing in a `git worktree` checkout (its .git
    # is a file), nor outside git.
    echo "release.sh: the build carries no commit (version $v): build from a git clone, not a worktree or an export" >&2
    rm -rf "$tmp"
    rmdir "$dist" 2>/dev/null || true
    exit 1
  fi
  if [ -n "$version" ] && [ "$v" != "$version" ]; then
    echo "release.sh: $platform built version $v, $version before" >&2
    exit 1
  fi
  version=$v
  out="coordd_${version}_${os}_${arch}"
  rm -rf "${dist:?}/$out"
  mv "$tmp" "$dist/$out"
  sums+=("$out/coordd" "$out/coordctl")
  echo "release.sh: $dist/$out ($version)"
done
(cd "$dist" && sha256sum "${sums[@]}" >SHA256SUMS)
echo "release.sh: $dist/SHA256SUMS"
