#!/usr/bin/env bash
# The richest end-to-end job at this commit; grows as layers land.
set -euo pipefail
HLX=${1:-build/bin/hlx}
"$HLX" version
