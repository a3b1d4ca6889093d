#!/usr/bin/env bash
# Assembles, from Debian's packages, the two base images docker/Dockerfile names, and tags them
# with those names in buildah's local storage, so that `make image` builds the Dockerfile as
# written on a machine that cannot pull from a registry.
#
#   scripts/base-images.sh [--force]      (--force: assemble again even if present)
#
# - RUNTIME_IMAGE (debian:bookworm-slim): mmdebstrap --variant=minbase, then what Debian's
#   official image builder (debuerreotype) adds to a "slim" image: docs, man pages and locales
#   left out (dpkg path-exclude), and the apt settings a Dockerfile relies on: docker-clean
#   (no .deb kept after an install), no translations, gzip'd indexes, no autostarted services.
# - SWIFT_IMAGE (swift:6.2-bookworm): that image, plus the packages the official Swift image
#   installs (swiftlang/swift-docker, 6.2/debian/12), plus this machine's installed Swift
#   toolchain copied to /usr (the official image unpacks its toolchain tarball there too, so
#   swift, swift-build and /usr/libexec/swift/linux/swift-backtrace-static are where the
#   Dockerfile expects them).
#   NOTE: the toolchain is the installed one (found through `swift` on PATH), whatever its
#   version: here Swift 6.3.1, not 6.2, under the name swift:6.2-bookworm. Package.swift needs
#   tools 6.2 or later, so the build is the same; the image's SWIFT_VERSION says which it is.
#
# Both are tagged docker.io/library/NAME:TAG, the name Docker gives the Dockerfile's short
# names, and the build uses --pull=never, so nothing is ever fetched from a registry.
# The root filesystem tarball is kept in .build-image/base/ (git-ignored, not in the build
# context: .dockerignore leaves .build* out).
set -euo pipefail
cd "$(dirname "$0")/.."

force=0
[[ "${1:-}" == "--force" ]] && force=1
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
DEBIAN_SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
WORK="${IMAGE_WORK:-$PWD/.build-image}/base"

# The names, as the Dockerfile's ARG defaults give them.
dockerfile_arg() { sed -n "s/^ARG $1=//p" docker/Dockerfile | head -n1; }
runtime_image="$(dockerfile_arg RUNTIME_IMAGE)"
swift_image="$(dockerfile_arg SWIFT_IMAGE)"
[[ "$runtime_image" =~ ^debian:([a-z]+)-slim$ ]] || { echo "base-images: cannot assemble RUNTIME_IMAGE=$runtime_image (expected debian:SUITE-slim)" >&2; exit 2; }
suite="${BASH_REMATCH[1]}"
[[ "$swift_image" =~ ^swift:[0-9.]+-$suite$ ]] || { echo "base-images: cannot assemble SWIFT_IMAGE=$swift_image (expected swift:VERSION-$suite)" >&2; exit 2; }
qualified() { echo "docker.io/library/$1"; }

present() { buildah inspect --type image "$(qualified "$1")" >/dev/null 2>&1; }
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }

assemble_debian() {
  local start stage tarball ctr
  start=$(date +%s)
  mkdir -p "$WORK"
  stage="$(mktemp -d "$WORK/stage.XXXXXX")"
  tarball="$WORK/$suite-slim.tar"
  # debuerreotype's minimizing config, as the official images carry it.
  mkdir -p "$stage/etc/apt/apt.conf.d" "$stage/etc/dpkg/dpkg.cfg.d" "$stage/usr/sbin"
  local clean='"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true";'
  printf 'DPkg::Post-Invoke { %s };\nAPT::Update::Post-Invoke { %s };\nDir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n' \
    "$clean" "$clean" >"$stage/etc/apt/apt.conf.d/docker-clean"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$stage/etc/apt/apt.conf.d/docker-autoremove-suggests"
  echo 'Acquire::GzipIndexes "true";' >"$stage/etc/apt/apt.conf.d/docker-gzip-indexes"
  echo 'Acquire::Languages "none";' >"$stage/etc/apt/apt.conf.d/docker-no-languages"
  echo 'force-unsafe-io' >"$stage/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
  printf '#!/bin/sh\nexit 101\n' >"$stage/usr/sbin/policy-rc.d"
  chmod 0644 "$stage"/etc/apt/apt.conf.d/* "$stage"/etc/dpkg/dpkg.cfg.d/*
  chmod 0755 "$stage/usr/sbin/policy-rc.d"
  local slim=()
  for p in doc groff info linda lintian/overrides locale man; do slim+=(--dpkgopt="path-exclude=/usr/share/$p/*"); done
  for p in 'doc/*/copyright' locale/locale.alias; do slim+=(--dpkgopt="path-include=/usr/share/$p"); done
  echo "base-images: $runtime_image from $DEBIAN_MIRROR (mmdebstrap, minbase)"
  mmdebstrap --quiet --variant=minbase --format=tar "${slim[@]}" \
    --customize-hook="cp -a '$stage'/. \"\$1\"/" \
    "$suite" "$tarball" \
    "deb $DEBIAN_MIRROR $suite main" "deb $DEBIAN_MIRROR $suite-updates main" \
    "deb $DEBIAN_SECURITY_MIRROR $suite-security main"
  rm -rf "$stage"
  ctr="$(buildah from scratch)"
  buildah add --quiet "$ctr" "$tarball" / >/dev/null
  # The package caches of mmdebstrap's own last apt call (the official image has none).
  buildah run --isolation chroot "$ctr" -- sh -c 'rm -rf /var/cache/apt/*.bin /var/lib/apt/lists/*'
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash "$ctr"
  buildah commit --quiet --rm "$ctr" "$(qualified "$runtime_image")" >/dev/null
  echo "base-images: $runtime_image assembled in $(elapsed "$start")"
}

assemble_swift() {
  local start toolchain version ctr
  start=$(date +%s)
  # The installed toolchain: .../usr/bin/swift -> its usr/ goes to the image's /usr.
  toolchain="$(dirname "$(dirname "$(readlink -f "$(command -v swift)")")")"
  [[ -x "$toolchain/bin/swift" && -x "$toolchain/libexec/swift/linux/swift-backtrace-static" ]] \
    || { echo "base-images: no Swift toolchain with swift-backtrace-static under $toolchain" >&2; exit 2; }
  version="$(swift --version 2>/dev/null | sed -n 's/.*(\(swift-[^)]*\)).*/\1/p' | head -n1)"
  echo "base-images: $swift_image = $runtime_image + the official image's packages + the toolchain in $toolchain ($version)"
  ctr="$(buildah from --pull=never "$(qualified "$runtime_image")")"
  # The package list of swiftlang/swift-docker 6.2/debian/12/Dockerfile, recommends included as there.
  buildah run --isolation chroot "$ctr" -- sh -c 'export DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true \
    && apt-get -q update && apt-get -q install -y binutils libicu-dev libcurl4-openssl-dev libedit-dev libsqlite3-dev \
       libncurses-dev libpython3-dev libxml2-dev pkg-config uuid-dev tzdata git gcc libstdc++-12-dev \
    && rm -r /var/lib/apt/lists/*' >"$WORK/swift-apt.log" 2>&1 \
    || { tail -n 20 "$WORK/swift-apt.log" >&2; buildah rm "$ctr" >/dev/null; exit 1; }
  buildah copy --quiet "$ctr" "$toolchain" /usr >/dev/null
  buildah run --isolation chroot "$ctr" -- sh -c 'chmod -R o+r /usr/lib/swift && swift --version'
  buildah config --env SWIFT_VERSION="$version" "$ctr"
  buildah commit --quiet --rm "$ctr" "$(qualified "$swift_image")" >/dev/null
  echo "base-images: $swift_image assembled in $(elapsed "$start")"
}

mkdir -p "$WORK"
rebuilt=0
if ((force)) || ! present "$runtime_image"; then assemble_debian; rebuilt=1; else echo "base-images: $runtime_image present"; fi
if ((force || rebuilt)) || ! present "$swift_image"; then assemble_swift; else echo "base-images: $swift_image present"; fi
