#!/usr/bin/env bash
# The release profile (fat LTO, one codegen unit: the command line as users build and
# install it) is not the one the test suite runs (`test-release`, the same optimization
# without link-time optimization; Cargo.toml). This checks that the two builds are the same
# program where it shows: every fixture, in three option sets and for x86_64 and aarch64,
# gives the same exit status and byte-identical objects from both, and so do the corpora
# beside the repository when they are there.
#
#   bash .ci/release_matches_tests.sh     # after `cargo test --profile test-release`
set -euo pipefail
cd "$(dirname "$0")/.."
# The command line built with a profile; its path as cargo reports it (wherever the target
# directory is).
build() {
  cargo build --profile "$1" --quiet --bin clif-merge --message-format=json |
    grep -o '"executable":"[^"]*"' | tail -n 1 | sed 's/^"executable":"\(.*\)"$/\1/'
}
release=$(build release)
tests=$(build test-release)
[ -x "$release" ] && [ -x "$tests" ] || { echo "release_matches_tests: cargo named no executable"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

checked=0
differ=0
# One input, one option set: both builds, then the same status and the same bytes.
compare() {
  local input=$1
  shift
  local a=0 b=0
  "$release" -q "$@" -o "$out/release.o" "$input" >/dev/null 2>&1 || a=$?
  "$tests" -q "$@" -o "$out/tests.o" "$input" >/dev/null 2>&1 || b=$?
  checked=$((checked + 1))
  if [ "$a" != "$b" ]; then
    echo "release_matches_tests: $input $*: exit status $a (release) against $b (test-release)"
    differ=$((differ + 1))
  elif [ "$a" = 0 ] && ! cmp -s "$out/release.o" "$out/tests.o"; then
    echo "release_matches_tests: $input $*: the objects differ"
    differ=$((differ + 1))
  fi
  rm -f "$out/release.o" "$out/tests.o"
}

while IFS= read -r clif; do
  for triple in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
    compare "$clif" --target "$triple"
    compare "$clif" --target "$triple" --merge-functions aliases --merge-similar
    compare "$clif" --target "$triple" --merge-functions aliases --merge-similar \
      --align-unlike-blocks --set preserve_frame_pointers=true --set opt_level=speed
  done
done < <(find fixtures -name '*.clif' | sort)

for corpus in re2 sqlite zstd; do
  dir=../shared/corpus/$corpus
  if [ ! -d "$dir" ]; then
    echo "release_matches_tests: skipping $corpus: $dir is absent"
    continue
  fi
  for triple in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
    compare "$dir" --target "$triple" --merge-functions aliases --merge-similar \
      --set preserve_frame_pointers=true --set opt_level=speed
  done
done

echo "release_matches_tests: $checked runs of each build, $differ that differ"
[ "$differ" = 0 ]
