#!/usr/bin/env bash
# Installs noida-db, the Kafka-protocol broker that the broker-process tests start
# (Tests/ApnsRelayProcessTests/BrokerProcessTests.swift), into the git-ignored .tools/: a venv of its own
# from PyPI (pinned), the wheel kept in .tools/wheels so a later install needs no network, and
# .tools/bin/noida-db, a link to the broker binary the wheel ships. The link skips pip's Python
# wrapper, which runs the binary as its child: a signal sent to the wrapper would not reach the broker.
#
#   scripts/install-noida.sh    idempotent; prints the binary's path
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
source "$SCRIPT_DIR/packaging-tools.sh"   # TOOLS, BIN, install_pinned_venv

NOIDA_PIN="noida-db==0.2.3"
NOIDA_VENV="$TOOLS/noida"
NOIDA_LINK="$BIN/noida-db"

install_pinned_venv "$NOIDA_VENV" "$NOIDA_PIN"

binary="$("$NOIDA_VENV/bin/python" -c 'from importlib.resources import files; print(files("noida_db") / "noida-db")')"
chmod 755 "$binary"
mkdir -p "$BIN"
ln -sfn "$binary" "$NOIDA_LINK"
# The wheel is built against a newer glibc than Debian 12's and says so on stderr ("weak version
# GLIBC_2.39 not found"); it runs all the same. Its version line proves it.
"$NOIDA_LINK" version 2>/dev/null | grep -q "${NOIDA_PIN##*==}" || { log "$NOIDA_LINK does not run"; exit 1; }
echo "$NOIDA_LINK"
