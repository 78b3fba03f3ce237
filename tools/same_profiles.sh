#!/usr/bin/env bash
# Checks that two ipuxla builds charge the same: `run --estimate-only --profile` on every
# conformance case (module.hlo and module.opt.hlo), the builder bench modules and the
# training-pipeline module, on the full ipu2 and on 4 tiles, compared as JSON with the host-time fields
# (keys naming host, _ms or seconds) left out. For host-speed work, which must never move
# a cycle or a byte.
#
# Usage: tools/same_profiles.sh BASE_IPUXLA NEW_IPUXLA
# (build the base from an earlier commit, e.g. in a git worktree, and copy its binary).
set -euo pipefail
base=${1:?usage: tools/same_profiles.sh BASE_IPUXLA NEW_IPUXLA}
new=${2:?usage: tools/same_profiles.sh BASE_IPUXLA NEW_IPUXLA}
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

modules=()
for m in "$root"/fixtures/conformance/*/module.hlo "$root"/fixtures/conformance/*/module.opt.hlo \
    "$root"/fixtures/builder/*/module.hlo \
    "$root"/fixtures/training-pipeline/*.hlo; do
    [ -f "$m" ] && modules+=("$m")
done

strip() {
    python3 - "$1" <<'PY'
import json, sys
def keep(k):
    return not any(w in k for w in ("host", "_ms", "seconds"))
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items() if keep(k)}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v
print(json.dumps(clean(json.load(open(sys.argv[1]))), sort_keys=True))
PY
}

compared=0 refused=0 differ=0
for m in "${modules[@]}"; do
    for tiles in "" "--tiles-per-ipu 4"; do
        name=$(echo "${m#"$root"/} $tiles" | tr '/ ' '__')
        # shellcheck disable=SC2086
        b_ok=0; "$base" run "$m" --estimate-only --profile "$out/b.json" -q $tiles >/dev/null 2>"$out/b.err" || b_ok=$?
        # shellcheck disable=SC2086
        n_ok=0; "$new" run "$m" --estimate-only --profile "$out/n.json" -q $tiles >/dev/null 2>"$out/n.err" || n_ok=$?
        if [ "$b_ok" != 0 ] || [ "$n_ok" != 0 ]; then
            if [ "$b_ok" != "$n_ok" ]; then
                echo "DIFFERS (exit $b_ok vs $n_ok): $name"; differ=$((differ + 1))
            else
                refused=$((refused + 1))
            fi
            continue
        fi
        if [ "$(strip "$out/b.json")" != "$(strip "$out/n.json")" ]; then
            echo "DIFFERS: $name"; differ=$((differ + 1))
        fi
        compared=$((compared + 1))
    done
done
echo "$compared profiles compared, $differ differ, $refused refused by both builds"
[ "$differ" = 0 ]
