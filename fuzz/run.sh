#!/usr/bin/env bash
# Runs one cargo-fuzz target for SECONDS, its corpus seeded from the project's HLO files.
#   bash fuzz/run.sh parse 600 [more libFuzzer flags]
# cargo-fuzz wants a nightly compiler; RUSTC_BOOTSTRAP=1 lets the pinned stable one build
# it (no sanitizer: `-s none`). Install the tool with `cargo install cargo-fuzz --locked`.
set -euo pipefail
cd "$(dirname "$0")"
target="${1:?usage: fuzz/run.sh TARGET SECONDS}"
seconds="${2:?usage: fuzz/run.sh TARGET SECONDS}"
shift 2
corpus="corpus/$target"
mkdir -p "$corpus"
if [ -z "$(ls -A "$corpus")" ]; then
  find ../fixtures -name '*.hlo' -size -64k -exec cp {} "$corpus/" \;
fi
RUSTC_BOOTSTRAP=1 cargo fuzz run -s none "$target" "$corpus" -- \
  -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 "$@"
