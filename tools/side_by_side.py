#!/usr/bin/env python3
"""The bench table with XLA timed side by side: for each case, XLA on this CPU compiles and
runs the case's `module.hlo` (in a fresh process), then `ipuxla bench` compiles and runs the
same module, in the same minute; prints one Markdown table of both and their ratios.

Then a second table: where ipuxla's run went (`host_steps` of `ipuxla bench --json`) beside
XLA's whole run: the products (matrix products and convolutions), the sums of their K parts
(the `….sum` compute sets, and those that sum the parts inside the element-wise op reading
them, `k_part_sums` in `host_steps`, that op counted with them), the host streams (work
XLA's run does not do: it keeps its arrays on the device and does not split K), and XLA's own rate on a plain f32 matrix product of this machine (timed in the same
process as the case), the time the case's FLOPs take at that rate; then the rest of the run
split into the exchange (rearrangements and copies between tile memories: the movement
the compiled program asks for, which XLA's one memory has no counterpart of; its time and
the bytes the host copied for it, `host_steps`' `bytes`) and the other compute sets
(element-wise, reductions, codelets; their time and the bytes their vertices read and
wrote).

Usage: python3 tools/side_by_side.py [CASE_DIR ...] [--runs N] [--ipuxla PATH]

Default cases: `../shared/conformance/bench_*` when present (with the corpus's inputs), else
`fixtures/conformance/bench_*` (inputs generated from `case.json`'s parameter shapes, for
both), then the builder's `fixtures/builder/bench_*` (generated inputs). Needs `pip install jax jaxlib numpy`; ipuxla itself never does. Build first:
`cargo build --release`.
"""

import glob
import json
import os
import subprocess
import sys

XLA_TIMER = r"""
import json, os, statistics, sys, time
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax, numpy as np
from jax._src.lib import xla_client as xc
from jax._src import xla_bridge as xb
import jaxlib._hlo as H

case, runs = sys.argv[1], int(sys.argv[2])
jax.config.update("jax_enable_x64", True)
spec = json.load(open(os.path.join(case, "case.json")))
text = open(os.path.join(case, "module.hlo")).read()
t0 = time.perf_counter()
mod = H.hlo_module_from_text(text)
mlir = xc._xla.mlir.hlo_to_stablehlo(mod.as_serialized_hlo_module_proto())
be = xb.get_backend("cpu")
exe = be.compile_and_load(mlir, xc.DeviceList(tuple(be.local_devices()[:1])), xc.CompileOptions())
compile_ms = (time.perf_counter() - t0) * 1e3
rng = np.random.default_rng(0)
args = []
for p in spec["params"]:
    path = os.path.join(case, p["file"])
    if os.path.exists(path):
        a = np.load(path)
    elif p["dtype"].startswith("float"):
        a = rng.uniform(-1, 1, p["shape"]).astype(p["dtype"])
    else:
        a = rng.integers(0, 10, p["shape"]).astype(p["dtype"])
    args.append(jax.device_put(a))
for _ in range(3):
    jax.block_until_ready(exe.execute(args))
ts = []
for _ in range(runs):
    t = time.perf_counter()
    jax.block_until_ready(exe.execute(args))
    ts.append((time.perf_counter() - t) * 1e3)
# XLA's own f32 matrix product rate on this machine, the same minute (1024^3, best of 9).
a = jax.device_put(rng.uniform(-1, 1, (1024, 1024)).astype(np.float32))
mm = jax.jit(lambda x, y: x @ y)
jax.block_until_ready(mm(a, a))
best = float("inf")
for _ in range(9):
    t = time.perf_counter()
    jax.block_until_ready(mm(a, a))
    best = min(best, time.perf_counter() - t)
print(json.dumps({
    "compile_ms": compile_ms,
    "run_ms_median": statistics.median(ts),
    "gemm_gflops": 2 * 1024**3 / best / 1e9,
}))
"""


def products_sums_streams(ours):
    """ipuxla's host ms a run on products (matrix products and convolutions), K-part sums,
    host streams, exchange (rearrangements and copies between tile memories) and the other
    compute sets, the bytes the exchange copied on the host a run and the bytes the other
    compute sets read and wrote, from `host_steps`."""
    products = sums = streams = exchange = rest = moved = touched = 0.0
    for s in ours["host_steps"]:
        step, ms = s["step"], s["ms"]
        if s["kind"] == "stream":
            streams += ms
        elif s["kind"] == "exchange":
            exchange += ms
            moved += s.get("bytes", 0.0)
        elif step.endswith(".sum") or s.get("k_part_sums"):
            sums += ms
        elif step in ("dot", "dot_general", "conv_general_dilated"):
            products += ms
        else:
            rest += ms
            touched += s.get("bytes", 0.0)
    return products, sums, streams, exchange, rest, moved, touched


def main():
    argv = sys.argv[1:]
    runs, ipuxla = 9, "target/release/ipuxla"
    if "--runs" in argv:
        i = argv.index("--runs")
        runs = int(argv[i + 1])
        del argv[i : i + 2]
    if "--ipuxla" in argv:
        i = argv.index("--ipuxla")
        ipuxla = argv[i + 1]
        del argv[i : i + 2]
    cases = argv or (
        (sorted(glob.glob("../shared/conformance/bench_*")) or sorted(
            glob.glob("fixtures/conformance/bench_*")
        ))
        + sorted(glob.glob("fixtures/builder/bench_*"))
    )
    if not cases:
        sys.exit("no cases: give case directories")
    try:
        import jax  # noqa: F401
    except ImportError:
        sys.exit("XLA is timed through jax: pip install jax jaxlib numpy")
    rows = []
    for case in cases:
        xla = json.loads(
            subprocess.run(
                [sys.executable, "-c", XLA_TIMER, case, str(runs)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        out = subprocess.run(
            [ipuxla, "bench", case, "--json", "--runs", str(runs), "--warmup", "2", "-q"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        ours = json.loads(out)
        ours = ours[0] if isinstance(ours, list) else ours
        rows.append((os.path.basename(case.rstrip("/")), xla, ours))
    print(
        "| case | XLA compile ms | ipuxla compile ms | × XLA | XLA run ms | ipuxla run ms "
        "| × XLA | simulated cycles | peak tile B |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, xla, ours in rows:
        print(
            f"| {name} | {xla['compile_ms']:.1f} | {ours['compile_ms']:.1f} "
            f"| {ours['compile_ms'] / xla['compile_ms']:.2f} | {xla['run_ms_median']:.2f} "
            f"| {ours['run_ms_median']:.2f} | {ours['run_ms_median'] / xla['run_ms_median']:.2f} "
            f"| {ours['simulated_cycles']:,} | {ours['peak_tile_bytes']:,} |".replace(",", " ")
        )
    print()
    print(
        "| case | XLA run ms | GFLOP | at XLA's gemm rate ms | ipuxla products ms "
        "| K-part sums ms | streams ms | sums + streams × XLA | (products at XLA's rate) + "
        "sums + streams × XLA | exchange ms | exchange MB copied | other compute sets ms "
        "| other compute sets MB |"
    )
    print(
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |"
    )
    for name, xla, ours in rows:
        products, sums, streams, exchange, rest, moved, touched = products_sums_streams(ours)
        gflop = ours["flops"] / 1e9
        at_rate = gflop / xla["gemm_gflops"] * 1e3
        x = xla["run_ms_median"]
        print(
            f"| {name} | {x:.2f} | {gflop:.2f} | {at_rate:.2f} | {products:.2f} | {sums:.2f} "
            f"| {streams:.2f} | {(sums + streams) / x:.2f} | {(at_rate + sums + streams) / x:.2f} "
            f"| {exchange:.2f} | {moved / 1e6:.1f} | {rest:.2f} | {touched / 1e6:.1f} |"
        )
    gemm = [xla["gemm_gflops"] for _, xla, _ in rows]
    print(f"\nXLA's f32 1024³ product on this machine: {min(gemm):.0f}-{max(gemm):.0f} GFLOP/s")


if __name__ == "__main__":
    main()
