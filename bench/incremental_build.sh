#!/usr/bin/env bash
# The edit-build loop: seconds of `cargo test --no-run` after a one-line edit of each file named
# (a private const appended, then the file restored), RUNS times each, with the median.
#
#     bench/incremental_build.sh [RUNS] FILE...
#     bench/incremental_build.sh 3 src/knobs/file/json.rs src/judge/scan/general.rs src/supervise/steps.rs
#
# Run it on a quiet machine after a full `cargo test --no-run`: it measures rebuilding, not the
# first build. The file is restored on exit, even when interrupted.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then runs=$1; shift; fi
[ $# -gt 0 ] || { echo "usage: $0 [RUNS] FILE..." >&2; exit 2; }
saved=$(mktemp)
current=""
restore() { [ -n "$current" ] && cp "$saved" "$current"; rm -f "$saved"; }
trap restore EXIT
cargo test --no-run -q >/dev/null 2>&1
for file in "$@"; do
  times=()
  for i in $(seq "$runs"); do
    cp "$file" "$saved"
    current=$file
    echo "#[allow(dead_code)] const INCREMENTAL_BUILD_$i: u32 = $RANDOM;" >>"$file"
    start=$(date +%s.%N)
    cargo test --no-run -q >/dev/null 2>&1
    end=$(date +%s.%N)
    cp "$saved" "$file"
    current=""
    times+=("$(echo "$end - $start" | bc)")
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '%-40s median %5.1f s  (%s)\n' "$file" "$median" "$(printf '%.1f ' "${times[@]}")"
done
# Leave the build as the tree is.
cargo test --no-run -q >/dev/null 2>&1
