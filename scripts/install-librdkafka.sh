#!/usr/bin/env bash
# librdkafka 2.8 or later (librdkafka1 and librdkafka-dev), which the relay needs; Debian bookworm ships 2.0.2.
#
#   scripts/install-librdkafka.sh [DEB_DIR]     idempotent: does nothing when 2.8 or later is installed
#
# Where the installed version is older (or none is), it installs Debian trixie's librdkafka source package
# rebuilt on this machine's Debian: a deb-src entry for trixie (source packages only, so no binary package
# of this machine changes), trixie's source, its build dependencies from this machine's own release, then
# `dpkg-buildpackage -b` without the upstream test suite (about a minute on 2 cores). The built .debs are kept
# in DEB_DIR (default: .tools/debs, git-ignored), so a second install takes seconds. docker/Dockerfile runs
# this script in a stage of its own and installs the same .debs in the image.
set -euo pipefail

MINIMUM=2.8.0
SOURCE_SUITE=trixie
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEB_DIR="${1:-$ROOT/.tools/debs}"

recent_enough() {  # recent_enough PACKAGE: installed, at MINIMUM or later
  local version
  version="$(dpkg-query -W -f='${Version}' "$1" 2>/dev/null)" || return 1
  dpkg --compare-versions "$version" ge "$MINIMUM"
}
if recent_enough librdkafka1 && recent_enough librdkafka-dev; then exit 0; fi

if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
apt_install() { DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }

built() { compgen -G "$DEB_DIR/librdkafka1_*.deb" >/dev/null && compgen -G "$DEB_DIR/librdkafka-dev_*.deb" >/dev/null \
  && compgen -G "$DEB_DIR/librdkafka++1_*.deb" >/dev/null; }

if ! built; then
  echo "librdkafka: building Debian $SOURCE_SUITE's source package (bookworm's is older than $MINIMUM)"
  start=$(date +%s)
  $sudo tee /etc/apt/sources.list.d/apns-relay-$SOURCE_SUITE-src.sources >/dev/null <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $SOURCE_SUITE
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  $sudo apt-get update -qq
  # build-dep brings build-essential too; fakeroot for a build as another user than root.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get build-dep -y -qq "librdkafka/$SOURCE_SUITE" >/dev/null
  [ -z "$sudo" ] || apt_install fakeroot
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  (
    cd "$work"
    apt-get source -qq "librdkafka/$SOURCE_SUITE" >/dev/null 2>&1
    cd librdkafka-*/
    DEB_BUILD_OPTIONS="nocheck nodoc parallel=$(nproc)" dpkg-buildpackage -b -uc -us ${sudo:+-rfakeroot} >"$work/build.log" 2>&1 \
      || { tail -n 40 "$work/build.log" >&2; exit 1; }
  )
  mkdir -p "$DEB_DIR"
  for package in librdkafka1 librdkafka++1 librdkafka-dev; do cp "$work"/"${package}"_*.deb "$DEB_DIR/"; done
  echo "librdkafka: built in $(( $(date +%s) - start )) s into $DEB_DIR"
fi

# apt resolves their dependencies (libssl3, libsasl2-2, ...) from this machine's release.
debs=()
for package in librdkafka1 librdkafka++1 librdkafka-dev; do
  debs+=("$(ls -1 "$DEB_DIR"/"${package}"_*.deb | sort -V | tail -n 1)")
done
$sudo apt-get update -qq
apt_install "${debs[@]}"
recent_enough librdkafka1 && recent_enough librdkafka-dev \
  || { echo "librdkafka: $MINIMUM or later is still not installed" >&2; exit 1; }
echo "librdkafka: $(dpkg-query -W -f='${Version}' librdkafka1) installed"
