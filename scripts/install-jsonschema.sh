#!/usr/bin/env bash
# Installs the JSON Schema validator the schema tests run (python-jsonschema, pinned) into a venv of its own in
# the git-ignored .tools/ (from PyPI the first time, from the wheels kept in .tools/wheels afterwards), and prints
# the path of its Python. Tests/TestSupport/SchemaValidation.swift runs scripts/validate-records.py with it.
#
#   scripts/install-jsonschema.sh    idempotent
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
source "$SCRIPT_DIR/packaging-tools.sh"   # TOOLS, install_pinned_venv

JSONSCHEMA_PIN="jsonschema==4.26.0"
VENV_DIR="$TOOLS/jsonschema"

install_pinned_venv "$VENV_DIR" "$JSONSCHEMA_PIN"
"$VENV_DIR/bin/python" -c 'import jsonschema' || { log "$VENV_DIR has no jsonschema"; exit 1; }
echo "$VENV_DIR/bin/python"
