#!/usr/bin/env bash
# Instruction counts (callgrind) of one bare walk and one hash pass over every function of
# re2: the hash/walk ratio without the noise of a busy machine. Needs valgrind
# (apt-get install valgrind) and ../shared/corpus/re2. About 2 minutes (the corpus is
# parsed under valgrind too; only the two functions are counted).
#
#   bash bench/instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d ../shared/corpus/re2 ] || { echo "instructions: skipping: ../shared/corpus/re2 is absent"; exit 0; }
command -v valgrind >/dev/null || { echo "instructions: valgrind is needed (apt-get install valgrind)"; exit 1; }
bin=$(cargo bench --bench detector --no-run 2>&1 | grep -o 'target/[^ )]*/deps/detector-[0-9a-f]*' | tail -1)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
count() { # $1: the function whose inclusive instructions are counted
  CLIF_MERGE_BENCH_ONCE=1 valgrind --tool=callgrind --collect-atstart=no \
    --toggle-collect="*$1*" --callgrind-out-file="$out/$1.out" "$bin" >/dev/null 2>"$out/$1.log"
  grep -E '^(summary|totals):' "$out/$1.out" | tail -1 | awk '{print $2}'
}
walk=$(count bare_walk)
hash=$(count hash_all)
echo "instructions executed over re2 (callgrind):"
echo "  bare walk  $walk"
echo "  hash       $hash"
awk -v h="$hash" -v w="$walk" 'BEGIN { printf "  hash / bare walk = %.2fx (requirement <= 5x: %s)\n", h / w, (h <= 5 * w) ? "met" : "NOT MET" }'
