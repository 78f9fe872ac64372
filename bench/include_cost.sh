#!/usr/bin/env bash
# The compile-time cost of including llmretry: the median wall time of compiling a translation unit
# without it, with only the standard headers that llmretry.hpp includes, with <llmretry/llmretry.hpp>,
# and with the testing helpers too.
#   bench/include_cost.sh [runs]      CXX and CXXFLAGS (default: c++, -std=c++17 -O2) choose the compiler.
set -euo pipefail

runs=${1:-7}
cxx=${CXX:-c++}
read -r -a flags <<< "${CXXFLAGS:--std=c++17 -O2}"
include_dir="$(cd "$(dirname "$0")/../include" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

printf 'int main() { return 0; }\n' > "$work/baseline.cpp"
printf '#include <llmretry/llmretry.hpp>\nint main() { return llmretry::RetryPolicy{}.max_attempts == 4 ? 0 : 1; }\n' \
  > "$work/llmretry.cpp"
grep -h '^#include <' "$include_dir"/llmretry/*.hpp "$include_dir"/llmretry/detail/*.hpp | sort -u > "$work/standard.cpp"
printf 'int main() { return 0; }\n' >> "$work/standard.cpp"
printf '#include <llmretry/llmretry.hpp>\n#include <llmretry/testing.hpp>\nint main() { return 0; }\n' > "$work/testing.cpp"

# Prints the median of `runs` compilations of $1, in milliseconds.
median_ms() {
  local times=()
  for ((i = 0; i < runs; i++)); do
    local start end
    start=$(date +%s%N)
    "$cxx" "${flags[@]}" -I"$include_dir" -c "$1" -o "$work/out.o"
    end=$(date +%s%N)
    times+=($(((end - start) / 1000000)))
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n "$((runs / 2 + 1))p"
}

echo "$("$cxx" --version | head -1), ${flags[*]}, median of $runs runs"
base=$(median_ms "$work/baseline.cpp")
standard=$(median_ms "$work/standard.cpp")
with=$(median_ms "$work/llmretry.cpp")
testing=$(median_ms "$work/testing.cpp")
printf '%-52s %6d ms\n' "empty translation unit" "$base"
printf '%-52s %6d ms  (+%d ms)\n' "the standard headers that llmretry.hpp includes" "$standard" "$((standard - base))"
printf '%-52s %6d ms  (+%d ms)\n' "#include <llmretry/llmretry.hpp>" "$with" "$((with - base))"
printf '%-52s %6d ms  (+%d ms)\n' "... and <llmretry/testing.hpp>" "$testing" "$((testing - base))"
