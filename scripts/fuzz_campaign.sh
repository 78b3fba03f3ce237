#!/usr/bin/env bash
# The long differential campaign (issue 29), in batches:
#
#   bash scripts/fuzz_campaign.sh FIRST [SUMMARY] [UNTIL] [BATCH]
#
# Checks BATCH seeds (default 200; modules of 24 instructions) and BATCH/2 replicated ones
# from FIRST, then the next BATCH from FIRST + BATCH, ..., stopping before UNTIL (default:
# never) or once SUMMARY.stop exists. Each batch appends a line to SUMMARY (default
# target/fuzz-campaign.summary; a relative path is from the repository):
#
#   FIRST rc=RC SECONDSs bin=MTIME HH:MM:SS
#
# rc=0: every seed of the batch passed (count only those); otherwise the batch's output,
# with each failing seed's module shrunk, is kept as SUMMARY.FIRST.log. The test binary is
# built once and copied beside SUMMARY, so rebuilding the project while the campaign runs
# does not change what it runs (copy a new build over it to switch; bin= records which).
# Two of these on two cores, each from its own FIRST, run about 25 seeds a second in all
# (2026-11-30). Run it niced (`nice -n 19`) to keep the machine usable.
set -euo pipefail

first=${1:?usage: fuzz_campaign.sh FIRST [SUMMARY] [UNTIL] [BATCH]}
summary=${2:-target/fuzz-campaign.summary}
until=${3:-}
batch=${4:-200}

cd "$(dirname "$0")/.."
binary="$summary.bin"
if [ ! -x "$binary" ]; then
    built=$(cargo test --release --test differential --no-run 2>&1 |
        sed -n 's/.*Executable tests\/differential.rs (\(.*\))/\1/p' | tail -n 1)
    [ -n "$built" ] || { echo "fuzz_campaign: could not build the differential test" >&2; exit 1; }
    cp "$built" "$binary.new" && mv "$binary.new" "$binary"
fi

n=$first
while [ ! -e "$summary.stop" ] && { [ -z "$until" ] || [ "$n" -lt "$until" ]; }; do
    log="$summary.$n.log"
    start=$(date +%s.%N)
    set +e
    IPUXLA_FUZZ_FIRST=$n IPUXLA_FUZZ_CASES=$batch IPUXLA_FUZZ_REPLICATED=$((batch / 2)) \
        IPUXLA_FUZZ_SIZE=24 "$binary" generated --test-threads=1 > "$log" 2>&1
    rc=$?
    set -e
    end=$(date +%s.%N)
    printf '%d rc=%d %.1fs bin=%s %s\n' "$n" "$rc" "$(echo "$end - $start" | bc)" \
        "$(stat -c %Y "$binary")" "$(date +%H:%M:%S)" >> "$summary"
    [ "$rc" -ne 0 ] || rm -f "$log"
    n=$((n + batch))
done
