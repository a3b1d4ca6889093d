#!/usr/bin/env bash
# `make image-check`: runs the image `make image` built the way the Helm chart runs it, and
# checks what is in it.
#
# How the chart runs it is read from `helm template` (DEPLOY.md's minimal install values):
# user, args, the config file and credentials mounts, /tmp. Each run below is
#   buildah run --isolation chroot --user 10001:10001 --cap-drop all ...
# (podman run and buildah's default OCI isolation are refused on these machines: crun sets
# RLIMIT_NPROC and does not support the hybrid cgroup layout; chroot isolation needs neither).
#
# What of the chart's securityContext is enforced here, and how:
#   runAsUser/runAsGroup 10001   --user 10001:10001 (supplementary group 10001, as fsGroup adds it);
#                                the process's /proc status is checked while `run` runs.
#   capabilities drop ALL        --cap-drop all: effective, permitted, inheritable and ambient
#                                sets empty (checked). The bounding set keeps CAP_SETUID, which
#                                buildah's chroot isolation leaves in for --user (reported).
#   readOnlyRootFilesystem       every top-level folder of the image, and every world-writable
#                                one under /etc and /run, is bind-mounted read-only onto itself.
#                                /etc and /run themselves stay writable for root, since buildah
#                                places /etc/hosts, /etc/resolv.conf, /etc/hostname and
#                                /run/.containerenv there on each run; for UID 10001 they are not
#                                writable (a probe tries every place), and after all the runs the
#                                container's writable layer must hold nothing but those mount
#                                points and the check's own.
#   /tmp the only writable place a tmpfs of the chart's tmpSizeLimit at /tmp (the emptyDir);
#                                the probe finds /tmp and nothing else writable. /dev/shm is a
#                                private tmpfs, as in a pod.
#   seccomp RuntimeDefault       buildah's default profile (Seccomp: 2, checked).
# Not enforced: allowPrivilegeEscalation: false (buildah 1.28 has no no-new-privileges, so
# NoNewPrivs is 0: reported), the pod's own network and PID namespaces (chroot isolation shares
# the host's: that is how the relay reaches the simulator on loopback here), and resource limits
# (no cgroups are touched).
#
# `apns-relay run` runs against Kafka's embedded mock cluster (kafka.brokers "embedded": librdkafka's
# mock cluster in the relay's own process, speaking Kafka over loopback) and the APNs simulator
# (`apns-relay simulator` from the same image, in a container of its own); the chart's rendered
# relay.yaml is used with APNS_RELAY_* overrides for the brokers, the APNs endpoint and CA, and
# a free port instead of 9090. Nothing but the image is needed: no host build of the project.
#
# Prints one PASS/FAIL line per check and ends with "N passed, M failed"; exits 1 if any failed.
# Logs: .build-image/check/.
set -uo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLS_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$TOOLS_ROOT"
started=$(date +%s)
IMAGE="$(bash scripts/image.sh --name)"
bash scripts/install-deps.sh buildah mmdebstrap curl procps >&2 || exit 2
source "$SCRIPT_DIR/packaging-tools.sh"
use_tools

WORK="${IMAGE_WORK:-$PWD/.build-image}/check"
rm -rf "$WORK" && mkdir -p "$WORK"
buildah inspect --type image "$IMAGE" >/dev/null 2>&1 || { echo "FAIL $IMAGE not found: run make image first"; echo "0 passed, 1 failed"; exit 1; }

# descendant PID NAME: the process named NAME below PID (the command below buildah's chroot runtime).
descendant() {
  ps -e -o pid=,ppid=,comm= | awk -v root="$1" -v name="$2" '
    { parent[$1] = $2; comm[$1] = $3 }
    END { for (p in comm) if (comm[p] == name) { for (q = p; q in parent; q = parent[q]) if (q == root) { print p; exit } } }'
}

# stop PID: stops the apns-relay started by `buildah run` PID (buildah does not pass SIGTERM on)
# and waits for that buildah run: SIGTERM, SIGKILL after 40 s.
stop() {
  local relay i
  relay="$(descendant "$1" apns-relay)"
  [[ -n "$relay" ]] && kill -TERM "$relay" 2>/dev/null
  for i in $(seq 1 80); do kill -0 "$1" 2>/dev/null || break; sleep 0.5; done
  [[ -n "$relay" ]] && kill -KILL "$relay" 2>/dev/null
  wait "$1" 2>/dev/null
}

relay_ctr="" sim_ctr="" sim_pid="" run_pid=""
cleanup() {
  local pid
  for pid in $run_pid $sim_pid; do stop "$pid"; done
  [[ -n "$relay_ctr" ]] && { buildah umount "$relay_ctr" >/dev/null 2>&1; buildah rm "$relay_ctr" >/dev/null 2>&1; }
  [[ -n "$sim_ctr" ]] && buildah rm "$sim_ctr" >/dev/null 2>&1
}
trap cleanup EXIT

# --- How the chart runs it -------------------------------------------------------------------
helm template apns-relay helm/apns-relay --namespace push \
  --set config.apns.auth.key_id=ABCDE12345 --set config.apns.auth.team_id=TEAM123456 \
  --set config.apns.topic=com.example.app >"$WORK/rendered.yaml" || exit 1
eval "$(py_check pod-spec "$WORK/rendered.yaml" "$WORK/relay.yaml")" || exit 1
entrypoint="$(buildah inspect --type image --format '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}' "$IMAGE")"
image_user="$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$IMAGE")"
read -r -a command <<<"$entrypoint $POD_ARGS"

chart_matches_image() {
  echo "chart: image $POD_IMAGE, user $POD_USER, command ${command[*]}; image: user $image_user, entrypoint $entrypoint"
  [[ "$POD_IMAGE" == "$IMAGE" && "$POD_USER" == "$image_user" && -n "$entrypoint" ]] &&
    [[ "$POD_READ_ONLY_ROOT" == true && "$POD_CAPS_DROP" == ALL && "$POD_TMP" == /tmp && "$POD_WRITABLE_MOUNTS" == /tmp ]]
}
check "the chart runs $IMAGE as its user ($image_user), read-only, no capabilities, /tmp writable" chart_matches_image

# The credentials the chart mounts (a throwaway token key; the simulator verifies the JWTs
# against its public half), readable by group 10001 only, as with fsGroup and mode 0440.
mkdir -p "$WORK/secrets" "$WORK/sim"
openssl ecparam -genkey -name prime256v1 -noout 2>/dev/null | openssl pkcs8 -topk8 -nocrypt -out "$WORK/secrets/$POD_SECRET_FILES"
openssl ec -in "$WORK/secrets/$POD_SECRET_FILES" -pubout -out "$WORK/sim/key.pub.pem" 2>/dev/null
chown -R "0:${POD_USER#*:}" "$WORK/secrets" && chmod 0750 "$WORK/secrets" && chmod 0440 "$WORK/secrets"/*
chmod 0644 "$WORK/relay.yaml" && chmod 0777 "$WORK/sim"

relay_ctr="$(buildah from --pull=never "$IMAGE")" || exit 1
root="$(buildah mount "$relay_ctr")" || exit 1
upper="${root%/merged}/diff"
read_only=()
for dir in "$root"/*; do
  name="${dir##*/}"
  [[ -d "$dir" && ! -L "$dir" ]] || continue
  case "$name" in proc | sys | dev | tmp | etc | run) continue ;; esac
  read_only+=(--mount "type=bind,src=$dir,dst=/$name,ro")
done
while IFS= read -r dir; do
  read_only+=(--mount "type=bind,src=$dir,dst=${dir#"$root"},ro")
done < <(find "$root/etc" "$root/run" -xdev -type d -perm -0002)
tmp_size="$(echo "$POD_TMP_SIZE" | sed 's/Mi$/m/; s/Gi$/g/')"
# as_chart [ENV...] -- COMMAND...: COMMAND in the relay's container as the chart runs it.
as_chart() {
  local env=()
  while [[ "$1" != "--" ]]; do env+=(-e "$1"); shift; done
  shift
  buildah run --isolation chroot --user "$POD_USER" --cap-drop all "${env[@]}" \
    --mount "type=tmpfs,destination=$POD_TMP,tmpfs-size=$tmp_size" --mount type=tmpfs,destination=/dev/shm \
    "${read_only[@]}" \
    --mount "type=bind,src=$WORK/relay.yaml,dst=$POD_CONFIG_PATH,ro" \
    --mount "type=bind,src=$WORK/secrets,dst=$POD_SECRET_DIR,ro" \
    --mount "type=bind,src=$WORK/sim,dst=/etc/apns-relay/simulator,ro" \
    "$relay_ctr" -- "$@"
}

# --- What is in the image --------------------------------------------------------------------
no_build_tools() {
  local found
  found="$(find "$root" -xdev \( -path '*/bin/*' -o -path '*/sbin/*' -o -path '*/libexec/*' -o -path '*/lib/gcc/*' \) \
    \( -name swift -o -name swiftc -o -name swift-frontend -o -name swift-build \
    -o -name gcc -o -name 'gcc-[0-9]*' -o -name cc -o -name cc1 -o -name cc1plus -o -name g++ -o -name c++ \
    -o -name clang -o -name 'clang-[0-9]*' -o -name ld -o -name ld.bfd -o -name ld.gold -o -name ld.lld \
    -o -name as -o -name make -o -name pkg-config \) -not -type d -print | sed "s|^$root||")"
  [[ -z "$found" ]] || { echo "build tools in the image:"; echo "$found"; return 1; }
  found="$(buildah run --isolation chroot "$relay_ctr" -- dpkg-query -W -f '${Package}\n' | grep -E -- '-dev$')"
  [[ -z "$found" ]] || { echo "development packages in the image:"; echo "$found"; return 1; }
  echo "no compiler, linker or build tool; no -dev package"
}
check "no compiler or build tools in the image" no_build_tools

no_package_cache() {
  local lists debs
  lists="$(ls -A "$root/var/lib/apt/lists")"
  debs="$(find "$root/var/cache/apt" -xdev \( -name '*.deb' -o -name '*.bin' \) | sed "s|^$root||")"
  [[ -z "$lists" && -z "$debs" ]] || { echo "/var/lib/apt/lists: ${lists:-empty}"; echo "/var/cache/apt: ${debs:-no packages}"; return 1; }
  echo "/var/lib/apt/lists empty; no .deb or .bin under /var/cache/apt"
}
check "no package lists or package cache in the image" no_package_cache

libraries_resolve() {
  as_chart -- ldd /usr/local/lib/apns-relay/apns-relay >"$WORK/ldd.txt" 2>&1 || { cat "$WORK/ldd.txt"; return 1; }
  cat "$WORK/ldd.txt"
  ! grep -q "not found" "$WORK/ldd.txt"
}
check "the binary's shared libraries all resolve (ldd in the image)" libraries_resolve

# The relay refuses a librdkafka older than 2.8.0 (KafkaLibrary.minimumVersion): the image carries the one
# scripts/install-librdkafka.sh builds.
librdkafka_version() {
  local version
  version="$(buildah run --isolation chroot "$relay_ctr" -- dpkg-query -W -f '${Version}' librdkafka1)" || return 1
  echo "librdkafka1 $version"
  dpkg --compare-versions "$version" ge 2.8.0
}
check "librdkafka in the image is 2.8.0 or newer (the relay's minimum)" librdkafka_version

# APNs' servers have presented certificates under the USERTrust RSA root since 2025 (sandbox from 20 January,
# production from 24 February): the relay trusts the image's bundle, which must carry that root (by its SHA-256).
USERTRUST_RSA_SHA256="E7:93:C9:B0:2F:D8:AA:13:E2:1C:31:22:8A:CC:B0:81:19:64:3B:74:9C:89:89:64:B1:74:6D:46:C3:D4:CB:D2"
apns_root_trusted() {
  buildah run --isolation chroot "$relay_ctr" -- cat /etc/ssl/certs/ca-certificates.crt >"$WORK/bundle.pem" || return 1
  local pem="" line found=1
  while IFS= read -r line; do
    pem+="$line"$'\n'
    if [[ $line == "-----END CERTIFICATE-----" ]]; then
      if openssl x509 -noout -fingerprint -sha256 <<<"$pem" | grep -q "$USERTRUST_RSA_SHA256"; then found=0; fi
      pem=""
    fi
  done <"$WORK/bundle.pem"
  echo "$(grep -c 'BEGIN CERTIFICATE' "$WORK/bundle.pem") roots in the image's bundle"
  return "$found"
}
check "the image's CA bundle has the USERTrust RSA root that APNs' certificates chain to" apns_root_trusted

only_tmp_writable() {
  local writable
  # shellcheck disable=SC2016  # expanded by the image's sh
  writable="$(as_chart -- sh -c 'for d in / /etc /etc/apns-relay /etc/apns-relay/secrets /usr /usr/local/bin \
      /usr/local/lib/apns-relay /var /var/tmp /var/lib /run /run/lock /root /home /opt /srv /mnt /tmp; do
      [ -d "$d" ] || continue; if (: >"$d/.probe") 2>/dev/null; then echo "$d"; rm -f "$d/.probe"; fi; done')"
  echo "writable for $POD_USER: ${writable//$'\n'/ }"
  [[ "$writable" == "$POD_TMP" ]]
}
check "as $POD_USER only $POD_TMP is writable" only_tmp_writable

# --- The commands, as the chart runs them --------------------------------------------------------
# The demo exits 0 even when no notification got through (as UID 10001 once: every APNs connect
# failed): its report must show deliveries too.
demo() {
  as_chart -- apns-relay demo >"$WORK/demo.log" 2>&1
  local rc=$?
  sed -n '/^What each device showed/,$p' "$WORK/demo.log"
  [[ $rc -eq 0 ]] && grep -Eq '^[[:space:]]+delivered[[:space:]]+[1-9]' "$WORK/demo.log"
}
check "apns-relay demo (exit 0, notifications delivered)" demo

check_config() {
  as_chart -- apns-relay check-config --config "$POD_CONFIG_PATH" >"$WORK/check-config.log" 2>&1
  local rc=$?
  cat "$WORK/check-config.log"
  [[ $rc -eq 0 ]] && grep -q "configuration OK" "$WORK/check-config.log"
}
check "apns-relay check-config on the chart's rendered relay.yaml" check_config

# The simulator: `apns-relay simulator` from the same image, in its own container, on loopback.
sim_ctr="$(buildah from --pull=never "$IMAGE")" || exit 1
buildah run --isolation chroot --user "$POD_USER" --cap-drop all --mount type=tmpfs,destination=/tmp \
  --volume "$WORK/sim:/sim" "$sim_ctr" -- apns-relay simulator --http2-port 0 --cert-dir /sim/certs \
  --jwt-public-key /sim/key.pub.pem >"$WORK/simulator.log" 2>&1 &
sim_pid=$!
sim_port=""
for _ in $(seq 1 60); do
  sim_port="$(sed -n 's/^APNs simulator on 127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$WORK/simulator.log")"
  [[ -n "$sim_port" ]] && break
  sleep 0.5
done
http_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

run_relay() {
  [[ -n "$sim_port" ]] || { echo "the simulator did not start:"; cat "$WORK/simulator.log"; return 1; }
  as_chart APNS_RELAY_KAFKA_BROKERS=embedded "APNS_RELAY_APNS_ENDPOINT=127.0.0.1:$sim_port" \
    APNS_RELAY_APNS_CA_FILE=/etc/apns-relay/simulator/certs/ca.pem "APNS_RELAY_RELAY_HTTP_PORT=$http_port" \
    -- "${command[@]}" >"$WORK/run.log" 2>&1 &
  run_pid=$!
  local ready="" i relay status rc t0
  for i in $(seq 1 120); do
    ready="$(curl -s -w ' %{http_code}' "http://127.0.0.1:$http_port/readyz" 2>/dev/null | tr -s '\n' ' ')"
    [[ "$ready" == *" 200" ]] && break
    kill -0 "$run_pid" 2>/dev/null || break
    sleep 0.5
  done
  echo "/readyz after $((i / 2)) s: ${ready:-no answer}"
  [[ "$ready" == *" 200" ]] || { tail -n 20 "$WORK/run.log"; return 1; }
  echo "/healthz: $(curl -s "http://127.0.0.1:$http_port/healthz")"
  # Read the page whole before matching: `curl | grep -q` under pipefail fails when grep stops
  # reading early and curl dies of SIGPIPE (a clean-clone CI run lost this check that way).
  local metrics series
  metrics="$(curl -sf "http://127.0.0.1:$http_port/metrics")" || { echo "/metrics did not answer 200"; return 1; }
  series="$(grep -c '^apns_relay_' <<<"$metrics")"
  echo "/metrics: $series apns_relay_ samples"
  [[ "$series" -gt 0 ]] || { echo "/metrics has no apns_relay_ series"; return 1; }
  relay="$(descendant "$run_pid" apns-relay)"
  [[ -n "$relay" ]] || { echo "no apns-relay process below $run_pid"; return 1; }
  status="$(grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' "/proc/$relay/status")"
  echo "$status" | sed 's/^/  /'
  for want in "Uid:.10001.10001.10001.10001" "Gid:.10001.10001.10001.10001" "CapPrm:.0000000000000000" \
              "CapEff:.0000000000000000" "CapInh:.0000000000000000" "CapAmb:.0000000000000000" "Seccomp:.2"; do
    echo "$status" | grep -Eq "^$want\$" || { echo "expected $want"; return 1; }
  done
  # Supplementary groups: none, or the pod's fsGroup (which Kubernetes adds).
  echo "$status" | grep -Eq "^Groups:[[:space:]]*(${POD_FS_GROUP}[[:space:]]*)?\$" || { echo "expected no supplementary group but ${POD_FS_GROUP}"; return 1; }
  t0=$(date +%s%N)
  kill -TERM "$relay"
  wait "$run_pid"; rc=$?
  run_pid=""
  echo "SIGTERM: exit $rc after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  tail -n 3 "$WORK/run.log"
  [[ $rc -eq 0 ]]
}
check "apns-relay run: /readyz 200 against the embedded cluster and the simulator, exit 0 on SIGTERM" run_relay
stop "$sim_pid"; sim_pid=""

nothing_written() {
  local allowed=" /etc /etc/hosts /etc/hostname /etc/resolv.conf /run /run/.containerenv /etc/apns-relay \
 $POD_CONFIG_PATH /etc/apns-relay/secrets $POD_SECRET_DIR /etc/apns-relay/simulator " path extra=""
  while IFS= read -r path; do
    [[ "$allowed" == *" ${path#"$upper"} "* ]] || extra+="${path#"$upper"} "
  done < <(find "$upper" -mindepth 1)
  [[ -z "$extra" ]] || { echo "written outside $POD_TMP: $extra"; return 1; }
  echo "the container's writable layer holds only mount points"
}
check "nothing written outside $POD_TMP (the container's writable layer)" nothing_written

size="$(buildah images --format '{{.Size}}' "$IMAGE" | head -n1)"
echo "image: $IMAGE, $size; image-check took $(( $(date +%s) - started )) s"
echo "$PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
