#!/usr/bin/env bash
# Out-of-tree consumer of an installed hlx: installs BUILD_DIR into a temporary prefix, builds
# tests/capi/consumer/consumer.c there with `pkg-config --cflags --libs hlx` and with CMake's
# find_package(hlx) (against hlx::hlx and hlx::hlx_static), runs each on a Qwen3 fixture (token ids)
# and a LLaVA fixture (an image and a prompt), and checks every output equals `hlx generate`.
# Then builds tests/capi/abi_v1_test.c (a program compiled against the frozen version-1 header) with
# AddressSanitizer against the installed libhlx.so and runs it: an old program on today's library.
# Usage: consumer_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
tmp=$(mktemp -d /tmp/hlx_consumer_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
hlx=$prefix/bin/hlx
"$hlx" fixture --family qwen3 --dtype f32 --out "$tmp/qwen3" >/dev/null
"$hlx" fixture --family llava-clip --dtype f32 --out "$tmp/llava" >/dev/null

# pkg-config, with the prefix found from hlx.pc's own location.
export PKG_CONFIG_PATH=$(dirname "$(find "$prefix" -name hlx.pc)")
libdir=$(pkg-config --variable=libdir hlx)
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/consumer_pc" "$src/tests/capi/consumer/consumer.c" \
  $(pkg-config --cflags --libs hlx) -Wl,-rpath,"$libdir"

# CMake's find_package, from a copy of the consumer project outside the tree.
cp -r "$src/tests/capi/consumer" "$tmp/cmake_src"
cmake -S "$tmp/cmake_src" -B "$tmp/cmake_build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$tmp/cmake_build" >/dev/null

n=8
failures=0
check() {  # NAME WANT GOT
  if [[ "$2" == "$3" && -n "$2" ]]; then echo "ok: $1 ($3)"; else echo "FAIL: $1: hlx generate '$2', consumer '$3'"; failures=$((failures + 1)); fi
}

prompt=3,14,15,92,65,35
want_text=$("$hlx" generate -m "$tmp/qwen3" --capacity 128 --tokens "$prompt" -n $n 2>/dev/null)
image=$src/assets/scene.png
question="<|image_pad|>
What is in this picture?"
image_ids=$("$hlx" tokenize -m "$tmp/llava" -p "$question" --add-special | tr ' ' ',')
want_image=$("$hlx" generate -m "$tmp/llava" --capacity 128 --tokens "$image_ids" --image "$image" -n $n 2>/dev/null)

for exe in "$tmp/consumer_pc" "$tmp/cmake_build/consumer_shared" "$tmp/cmake_build/consumer_static"; do
  name=$(basename "$exe")
  check "$name text" "$want_text" "$("$exe" "$tmp/qwen3" $n --tokens "$prompt")"
  check "$name image" "$want_image" "$("$exe" "$tmp/llava" $n --image "$image" "$question")"
done
# The shared builds really use the installed libhlx.so (not a static copy). (grep without -q: an
# early exit would make ldd die of SIGPIPE, failing the pipeline under pipefail.)
for exe in "$tmp/consumer_pc" "$tmp/cmake_build/consumer_shared"; do
  ldd "$exe" | grep "$prefix/.*libhlx.so" >/dev/null || { echo "FAIL: $(basename "$exe") does not load $prefix's libhlx.so"; failures=$((failures + 1)); }
done

# A version-1 program under AddressSanitizer against the installed (newer) library.
cc -std=c11 -Wall -Wextra -Werror -g -fsanitize=address -fno-omit-frame-pointer -I"$src/tests/capi" \
  -o "$tmp/abi_v1" "$src/tests/capi/abi_v1_test.c" $(pkg-config --cflags --libs hlx) -Wl,-rpath,"$libdir"
if out=$("$tmp/abi_v1" "$hlx" 2>&1); then
  echo "ok: abi_v1 under ASan ($(echo "$out" | tail -1))"
else
  echo "FAIL: abi_v1 under ASan:"; echo "$out" | tail -30; failures=$((failures + 1))
fi
exit $((failures > 0))
