#!/usr/bin/env bash
# run.sh FUZZER SEED_DIR: a bounded libFuzzer run (seconds, not hours) that fails on any crash.
set -euo pipefail
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$1" -runs="${HLX_FUZZ_RUNS:-20000}" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
     -artifact_prefix="$scratch/" "$scratch" "$2"
