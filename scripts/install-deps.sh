#!/usr/bin/env bash
# Installs the system packages the build and the tests need, only when missing (idempotent).
#   scripts/install-deps.sh [PACKAGE...]   (more packages: `make image` adds buildah and mmdebstrap)
set -euo pipefail

# librdkafka (1 and -dev) 2.8 or later: scripts/install-librdkafka.sh, after these (Debian bookworm's is 2.0.2).
# libnghttp2-dev: the HTTP/2 library of the relay's default APNs client (APNsNGHTTP2), through the CNGHTTP2 module.
# libjemalloc-dev: apns-relay's heap allocator (the CJemalloc target links it; the image carries libjemalloc2).
# tinyproxy: the HTTP CONNECT proxy the apns.proxy tests start (in the foreground, on their own port).
# iptables: the network-cut process tests hold a relay's connections to the brokers (nf_tables, as root).
# prometheus: promtool (the chart's alert rules, `promtool test rules`) and the server scripts/check-monitoring.sh
# runs against a relay (never as a service: the tests start it on their own port); kcat: the events that
# check-monitoring.sh produces to the relay's embedded Kafka.
packages=(libnghttp2-dev libjemalloc-dev pkg-config nghttp2-client openssl python3-venv tinyproxy prometheus kcat iptables "$@")
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done

if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

bash "$(dirname "${BASH_SOURCE[0]}")/install-librdkafka.sh"

pkg-config --exists rdkafka || { echo "librdkafka not found through pkg-config" >&2; exit 1; }
pkg-config --exists libnghttp2 || { echo "libnghttp2 not found through pkg-config" >&2; exit 1; }
