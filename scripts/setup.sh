#!/usr/bin/env bash
# Installs everything hlx needs from Debian packages. Idempotent: does nothing when all are present.
set -euo pipefail

DEBIAN_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libdnnl-dev            # oneDNN 2.6: matmul backend (AMX / AVX-512)
  nlohmann-json3-dev     # JSON: safetensors headers, HF configs
  libcli11-dev           # command-line parsing
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev libomp-dev  # libFuzzer, sanitizer and OpenMP runtimes for the clang build
  python3-numpy          # independent numpy references (/usr/bin/python3)
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
