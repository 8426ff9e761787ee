#!/usr/bin/env bash
# libhlx.so exports exactly the functions declared in include/hlx/hlx.h: the defined dynamic symbols
# (nm -D --defined-only) must equal that list (no C++ symbol, no helper, none missing), and the
# SONAME must be libhlx.so.<HLX_ABI_VERSION>. Every function of an earlier release of the same ABI
# (the frozen headers tests/capi/hlx_v*.h) must still be declared and exported: hlx.h may turn a name
# into a macro (hlx_model_options_init), never drop the function.  Usage: exports_test.sh LIBHLX_SO HLX_H
set -euo pipefail
lib=$1
header=$2
declared=$(sed -nE 's/^[a-z_][a-z0-9_ *]*[ *](hlx_[a-z0-9_]+)\(.*/\1/p' "$header" | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u)
status=0
if [[ "$declared" != "$exported" ]]; then
  echo "FAIL: exported dynamic symbols differ from hlx.h (< header only, > library only):"
  diff <(echo "$declared") <(echo "$exported") || true
  status=1
fi
for old in "$(dirname "$0")"/hlx_v*.h; do
  gone=$(comm -23 <(sed -nE 's/^[a-z_][a-z0-9_ *]*[ *](hlx_[a-z0-9_]+)\(.*/\1/p' "$old" | sort -u) <(echo "$exported"))
  if [[ -n "$gone" ]]; then
    echo "FAIL: functions of $(basename "$old") no longer exported:" $gone
    status=1
  fi
done
abi=$(sed -nE 's/^#define HLX_ABI_VERSION ([0-9]+)$/\1/p' "$header")
soname=$(readelf -d "$lib" | sed -nE 's/.*Library soname: \[(.*)\]/\1/p')
if [[ "$soname" != "libhlx.so.$abi" ]]; then
  echo "FAIL: SONAME '$soname', expected libhlx.so.$abi"
  status=1
fi
[[ $status == 0 ]] && echo "ok: $(echo "$exported" | wc -l) hlx_* functions exported, SONAME $soname"
exit $status
