"""Run an HLO text module on XLA's CPU backend and write its results as .npy files.

Usage: python3 scripts/xla_run.py MODULE.hlo INPUTS_DIR OUT_DIR
  INPUTS_DIR holds 0.npy, 1.npy, ... (entry parameter K in K.npy); OUT_DIR receives
  0.npy, 1.npy, ... (result tuple element K, or the single result as 0.npy).

This is how the project gets XLA's own results for programs XLA did not write itself
(for example `ipuxla convert --precision-mode FP16` output): XLA parses the very same
text, compiles it and runs it. Needs `pip install jax jaxlib numpy`; nothing in the
build or the tests runs it, they read the .npy files it wrote.
"""
import os, sys
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np, jax
import jaxlib._hlo as H
from jax._src.lib import xla_client as xc
from jax._src import xla_bridge as xb

module, inputs, out = sys.argv[1:4]
jax.config.update("jax_enable_x64", True)
mod = H.hlo_module_from_text(open(module).read())
mlir = xc._xla.mlir.hlo_to_stablehlo(mod.as_serialized_hlo_module_proto())
be = xb.get_backend("cpu")
exe = be.compile_and_load(mlir, xc.DeviceList(tuple(be.local_devices()[:1])), xc.CompileOptions())
names = sorted((f for f in os.listdir(inputs) if f.endswith(".npy")), key=lambda f: int(f.split(".")[0]))
args = [jax.device_put(np.load(os.path.join(inputs, f))) for f in names]
results = exe.execute(args)
os.makedirs(out, exist_ok=True)
for k, r in enumerate(results):
    np.save(os.path.join(out, f"{k}.npy"), np.asarray(r))
print(f"{module}: {len(results)} result(s) written to {out}")
