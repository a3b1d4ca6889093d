#!/usr/bin/env bash
# Builds the fuzz targets with libFuzzer into their own scratch path and runs each one.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (FUZZ_SECONDS, default 60; default targets: all)
#
# Targets: every Tests/Fuzz/<Name>/ directory with sources (see `fuzzTargets` in Package.swift), plus
# ConfigurationFuzz (the configuration loader, built from the apns-relay target). Each run starts from
# the committed seed corpus Tests/Fuzz/Corpus/<Name>/ and keeps what it finds in .build/fuzz/corpus/<Name>/;
# a crash leaves its input in .build/fuzz/artifacts/<Name>/ and fails the script. Add a crashing input
# to the committed corpus once it is fixed: the CLI tests replay every corpus file.
set -euo pipefail
# Let libFuzzer, not the Swift runtime's backtracer, handle a trap: it then saves the crashing input.
export SWIFT_BACKTRACE=enable=no
cd "$(dirname "$0")/.."

seconds=${1:-${FUZZ_SECONDS:-60}}
shift || true
scratch=.build/fuzz
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for directory in Tests/Fuzz/*/; do
        name=$(basename "$directory")
        case "$name" in Corpus | Dictionaries | Support) continue ;; esac
        targets+=("$name")
    done
    targets+=(ConfigurationFuzz)
fi

build_started=$(date +%s)
for target in "${targets[@]}"; do
    product=$target
    [ "$target" = ConfigurationFuzz ] && product=apns-relay
    # --sanitize=fuzzer instruments Swift and C code (libyaml, BoringSSL) and links libFuzzer;
    # FUZZING swaps each target's corpus-replaying main for LLVMFuzzerTestOneInput.
    mkdir -p "$scratch"
    if ! swift build --scratch-path "$scratch" --sanitize=fuzzer -Xswiftc -DFUZZING --product "$product" > "$scratch/build-$target.log" 2>&1; then
        grep -E "error" "$scratch/build-$target.log" | head -20 >&2
        echo "fuzz: $target ($product) did not build; log in $scratch/build-$target.log" >&2
        exit 1
    fi
    cp "$scratch/debug/$product" "$scratch/$target"
done
echo "fuzz: built ${#targets[@]} targets in $(($(date +%s) - build_started)) s"

failed=0
for target in "${targets[@]}"; do
    corpus="$scratch/corpus/$target"
    artifacts="$scratch/artifacts/$target"
    mkdir -p "$corpus" "$artifacts"
    options=(-max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$artifacts/" -timeout=10 -rss_limit_mb=2048)
    [ -f "Tests/Fuzz/Dictionaries/$target.dict" ] && options+=(-dict="Tests/Fuzz/Dictionaries/$target.dict")
    echo "fuzz: $target for ${seconds} s"
    if "$scratch/$target" "${options[@]}" "$corpus" "Tests/Fuzz/Corpus/$target" > "$scratch/$target.log" 2>&1; then
        grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::new_units_added" "$scratch/$target.log" | sed "s/^/  /"
    else
        failed=1
        echo "fuzz: $target FAILED; input in $artifacts/, log in $scratch/$target.log" >&2
        grep -E "Fatal error|invariant broken|ERROR|SUMMARY|Test unit written" "$scratch/$target.log" | head -10 >&2
    fi
done
exit $failed
