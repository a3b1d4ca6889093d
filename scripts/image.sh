#!/usr/bin/env bash
# `make image`: builds docker/Dockerfile as written, with buildah, into buildah's local storage.
#
#   scripts/image.sh           build; the image is tagged with the chart's default reference
#   scripts/image.sh --name    print that reference (image.repository:appVersion, e.g. apns-relay:0.1.0)
#
# The base images the Dockerfile names cannot be pulled here: scripts/base-images.sh assembles
# them from Debian's packages first (once; they stay in buildah's storage), and the build runs
# with --pull=never.
#
# What only this machine has is passed in from outside; the Dockerfile stays what a user builds
# with Docker and the internet. Where git reads github.com from a local folder (a system or
# global `url.<folder>.insteadOf` setting, as on the machines this project is developed on),
# that folder is mounted read-only at /mnt in every RUN, and the build's $HOME (/root) is a
# scratch folder holding a .gitconfig with the same redirect to /mnt. Both mount points exist
# in the Debian images (mounting where nothing exists leaves an empty file or folder behind in
# the image), and the scratch $HOME keeps SwiftPM's caches out of the layers.
#
# --isolation chroot: buildah's default, an OCI runtime (crun), refuses to start a container on
# these machines (cgroups in hybrid mode, RLIMIT_NPROC); chroot isolation needs neither.
set -euo pipefail
cd "$(dirname "$0")/.."

chart=helm/apns-relay
repository="$(awk '/^image:/ { in_image = 1; next } in_image && /^  repository:/ { print $2; exit } /^[^ #]/ { in_image = 0 }' "$chart/values.yaml")"
app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$chart/Chart.yaml")"
[[ -n "$repository" && -n "$app_version" ]] || { echo "image: no image.repository / appVersion in $chart" >&2; exit 2; }
IMAGE="${IMAGE:-$repository:$app_version}"
if [[ "${1:-}" == "--name" ]]; then echo "$IMAGE"; exit 0; fi

WORK="${IMAGE_WORK:-$PWD/.build-image}"
bash scripts/install-deps.sh buildah mmdebstrap
bash scripts/base-images.sh

mounts=()
home="$WORK/build-home"
rm -rf "$home" && mkdir -p "$home"
mirror=""
while read -r key value; do
  base="${key#url.}" && base="${base%.insteadof}"
  [[ -d "$base" ]] || continue
  [[ -z "$mirror" || "$mirror" == "$base" ]] || { echo "image: more than one local git mirror ($mirror, $base)" >&2; exit 2; }
  mirror="$base"
  git config --file "$home/.gitconfig" --add "url./mnt/.insteadOf" "$value"
done < <(git config --get-regexp '^url\..*\.insteadof$' || true)
if [[ -n "$mirror" ]]; then
  echo "image: git reads github.com from $mirror here: mounted at /mnt for the build"
  mounts+=(--volume "$mirror:/mnt:ro" --volume "$home:/root")
fi

start=$(date +%s)
buildah bud --isolation chroot --pull=never --layers "${mounts[@]}" \
  -f docker/Dockerfile -t "$IMAGE" .
echo "image: $IMAGE built in $(( $(date +%s) - start )) s; $(buildah images --format '{{.Size}}' "$IMAGE" | head -n1)"
