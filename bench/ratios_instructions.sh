#!/usr/bin/env bash
# Issue #14's compile-time ratios counted in instructions (callgrind) rather than timed:
# the same four runs as `cargo bench --bench ratios` (compiling every function, identical
# merging, merge-similar's holes alone, merge-similar with alignment merging; re2, x86_64,
# one thread, `preserve_frame_pointers`, `opt_level=speed`, `-o`), each split at the stage
# boundaries: reading, the merge stage, code generation with machine-code folding, and the
# rest (defining, writing the object, exiting). Instruction counts do not depend on what
# else the machine is doing, so this tells changes apart that the clock cannot; the clock's
# ratios are higher than these wherever the merge stage runs at a lower rate of
# instructions per cycle than Cranelift does (bench/README.md §10).
#
#   bash bench/ratios_instructions.sh            # re2
#   CLIF_MERGE_RATIO_CORPUS=sqlite bash bench/ratios_instructions.sh
#   CLIF_MERGE_BIN=/path/to/other/clif-merge bash bench/ratios_instructions.sh
#
# Needs valgrind and ../shared/corpus; about 3 minutes on re2.
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=${CLIF_MERGE_RATIO_CORPUS:-re2}
dir=../shared/corpus/$corpus
[ -d "$dir" ] || { echo "ratios_instructions: skipping: $dir is absent"; exit 0; }
command -v valgrind >/dev/null || { echo "ratios_instructions: valgrind is needed (apt-get install valgrind)"; exit 1; }
# CLIF_MERGE_BIN names another build of the command to count (a baseline's, say).
bin=${CLIF_MERGE_BIN:-target/release/clif-merge}
[ -n "${CLIF_MERGE_BIN:-}" ] || cargo build --release --quiet
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Instructions of each stage of one run, split where the command calls the library once
# per run: reading (up to the check of unique names), the merge stage as the report times
# it (building the module, then analysis, up to code generation), code generation with
# machine-code folding (up to defining), and the rest (defining, writing, exiting).
stages() {
  rm -f "$out"/cg.out*
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
    --dump-before='clif_merge::read::check_unique_names' \
    --dump-before='clif_merge::emit::compile::compile_bodies' \
    --dump-before='clif_merge::emit::define::define_all' \
    "$bin" -q --threads 1 --set preserve_frame_pointers=true --set opt_level=speed \
    "$@" -o "$out/out.o" "$dir" >/dev/null 2>&1
  local counts=()
  for f in "$out/cg.out.1" "$out/cg.out.2" "$out/cg.out.3" "$out/cg.out"; do
    [ -f "$f" ] || { echo "ratios_instructions: callgrind wrote no $f" >&2; exit 1; }
    counts+=("$(grep -E '^(summary|totals):' "$f" | head -1 | awk '{print $2}')")
  done
  echo "${counts[*]}"
}

read -r _ _ all _ <<<"$(stages --merge-functions disabled)"
echo "$corpus, x86_64, 1 thread: compiling every function $((all / 1000000)) M instructions"
printf '%-30s %14s %7s %24s\n' run "merge stage" share "(merge+codegen+fold)/all"
for run in "identical merging (aliases)|--merge-functions aliases" \
  "merge-similar, holes only|--merge-functions aliases --merge-similar --no-alignment-merging" \
  "merge-similar with alignment|--merge-functions aliases --merge-similar"; do
  name=${run%%|*}
  # shellcheck disable=SC2086
  read -r _ merge codegen _ <<<"$(stages ${run#*|})"
  awk -v n="$name" -v m="$merge" -v c="$codegen" -v a="$all" \
    'BEGIN { printf "%-30s %12.0f M %6.1f%% %24.3f\n", n, m / 1e6, 100 * m / a, (m + c) / a }'
done
