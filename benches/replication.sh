#!/usr/bin/env bash
# The replication table of BENCHMARKS.md: XLA's data-parallel training step
# (fixtures/conformance-spmd/spmd_dp_mlp_train, written for 4 devices) on 4, 8 and 16
# replicas, one IPU each: simulated cycles and bytes over IPU-Links (replica 0's profile),
# and host wall time for the whole command in one process and, with an MPI build
# (`cargo build --release --features mpi`), in two.
# Usage: bash benches/replication.sh [runs per measurement, default 5]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
case=fixtures/conformance-spmd/spmd_dp_mlp_train
bin=target/release/ipuxla
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
inputs=""
for k in 0 1 2 3 4 5; do
  # Replica 0's values go to every replica (a file of the parameter's own shape).
  python3 -c "import numpy as np; np.save('$work/$k.npy', np.load('$case/inputs/$k.npy')[0])"
  inputs="$inputs$k=$work/$k.npy;"
done
# The median of `runs` wall times of a command, in ms.
median_ms() {
  local times=()
  for _ in $(seq "$runs"); do
    local t0 t1
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s%N)
    times+=($(( (t1 - t0) / 1000000 )))
  done
  printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (runs + 1) / 2 ))p"
}
mpi=""
if ldd "$bin" | grep -q libmpi && command -v mpirun >/dev/null; then
  mpi="mpirun --allow-run-as-root --oversubscribe -np 2"
fi
echo "| replicas | simulated cycles | of which collectives | bytes over IPU-Links (per replica) | host ms, 1 process | host ms, 2 processes |"
echo "| --- | --- | --- | --- | --- | --- |"
for n in 4 8 16; do
  groups=$(seq -s, 0 $((n - 1)))
  sed -e "s/num_partitions=4/num_partitions=$n/" -e "s/replica_groups={{0,1,2,3}}/replica_groups={{$groups}}/g" \
    "$case/module.opt.hlo" > "$work/dp_$n.hlo"
  run=("$bin" run "$work/dp_$n.hlo" --replicas "$n" --inputs "$inputs" --outdir "$work/out" --overwrite)
  summary=$("${run[@]}" --profile "$work/p.json")
  cycles=$(echo "$summary" | sed -n 's/^simulated: \([0-9]*\) cycles.*/\1/p')
  collective=$(echo "$summary" | sed -n 's/.*collectives \([0-9]*\) cycles.*/\1/p')
  links=$(echo "$summary" | sed -n 's/.*cycles, \([0-9]*\) B over IPU-Links per replica.*/\1/p')
  one=$(median_ms "${run[@]}")
  two="(no MPI build)"
  if [ -n "$mpi" ]; then two=$(median_ms $mpi "${run[@]}"); fi
  echo "| $n | $cycles | $collective | $links | $one | $two |"
done
