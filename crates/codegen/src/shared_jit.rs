//! One JIT module per process that kernel caches share ([`crate::KernelCache::shared`]).
//!
//! Engines loaded one after another mostly compile the same kernels: of the 5 500 kernel
//! compiles of 40 differential seeds (four engines each), 5 249 were of a spec an earlier
//! engine had compiled. Each engine's cache compiled them again into a module of its own,
//! a fifth of the campaign's time. Shared caches take a kernel already compiled here.
//!
//! The module lives while a cache holding it does, and while it is the current one. Once
//! it has compiled [`KERNELS_PER_SHARED_MODULE`] kernels, the next shared cache starts a
//! new module, and the old one is freed when the last cache holding it drops: a
//! long-running process keeps a bounded amount of code however many distinct kernels
//! it compiles.

use crate::CodegenError;
use crate::fp::FloatMode;
use crate::jit::{Compiler, Entry, compile_entry};
use crate::kernel::KernelSpec;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// How many kernels a shared module compiles before new caches move to a fresh one (each
/// is a few hundred bytes to a few KiB of code).
pub const KERNELS_PER_SHARED_MODULE: usize = 4096;

/// The module new shared caches compile into.
static CURRENT: Mutex<Option<Arc<SharedJit>>> = Mutex::new(None);

/// A JIT module and the kernels compiled into it, by spec and floating-point mode.
pub(crate) struct SharedJit {
    inner: Mutex<Inner>,
}

struct Inner {
    compiler: Compiler,
    /// Kernels compiled by spec, per floating-point mode (looked up by reference).
    compiled: HashMap<FloatMode, HashMap<KernelSpec, Entry>>,
    /// Code compiled here in all: the kernels above and code not cached by spec
    /// ([`SharedJit::with_compiler`]).
    code: usize,
}

impl SharedJit {
    /// The current module, or a fresh one when there is none or it is full (or a compile
    /// in it panicked, which may have left it mid-definition).
    pub(crate) fn current() -> Result<Arc<SharedJit>, CodegenError> {
        let mut current = CURRENT
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(shared) = current.as_ref()
            && shared
                .lock()
                .is_ok_and(|inner| inner.code < KERNELS_PER_SHARED_MODULE)
        {
            return Ok(Arc::clone(shared));
        }
        let fresh = Arc::new(SharedJit {
            inner: Mutex::new(Inner {
                compiler: Compiler::new()?,
                compiled: HashMap::new(),
                code: 0,
            }),
        });
        *current = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    /// `spec` compiled under `mode`: the entry compiled before, or compiled now.
    pub(crate) fn entry(&self, spec: &KernelSpec, mode: FloatMode) -> Result<Entry, CodegenError> {
        let mut inner = self.lock()?;
        if let Some(entry) = inner.compiled.get(&mode).and_then(|specs| specs.get(spec)) {
            return Ok(entry.clone());
        }
        let entry = compile_entry(&mut inner.compiler, spec, mode)?;
        inner.code += 1;
        (inner.compiled.entry(mode).or_default()).insert(spec.clone(), entry.clone());
        Ok(entry)
    }

    /// Runs `f` with the module's compiler (code that is not cached by spec), counting
    /// what it compiles as one kernel towards [`KERNELS_PER_SHARED_MODULE`].
    pub(crate) fn with_compiler<R>(
        &self,
        f: impl FnOnce(&mut Compiler) -> R,
    ) -> Result<R, CodegenError> {
        let mut inner = self.lock()?;
        inner.code += 1;
        Ok(f(&mut inner.compiler))
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>, CodegenError> {
        self.inner.lock().map_err(|_| {
            CodegenError::Jit("a kernel compile in the shared JIT module panicked".into())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{BinaryOp, ElementwiseKernel, Expr};

    fn add(dtype: crate::DType) -> KernelSpec {
        binary(BinaryOp::Add, dtype)
    }

    fn binary(op: BinaryOp, dtype: crate::DType) -> KernelSpec {
        KernelSpec::Elementwise(ElementwiseKernel {
            inputs: vec![dtype, dtype],
            outputs: vec![(
                dtype,
                Expr::Binary(op, Box::new(Expr::Input(0)), Box::new(Expr::Input(1))),
            )],
            repeats: Vec::new(),
        })
    }

    /// Threads compiling kernels into the shared module while others run the ones
    /// compiled before (new code is made executable beside running code): every result
    /// right, every thread's `a op b` in f32 against the host's.
    #[test]
    fn threads_compile_and_run_shared_kernels_at_once() {
        let ops = [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Max,
            BinaryOp::Min,
        ];
        let host = |op: BinaryOp, a: f32, b: f32| match op {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Max => a.max(b),
            _ => a.min(b),
        };
        std::thread::scope(|scope| {
            for thread in 0..4usize {
                scope.spawn(move || {
                    for round in 0..25usize {
                        let mut cache = crate::KernelCache::shared().unwrap();
                        let op = ops[(thread + round) % ops.len()];
                        // A spec no other thread or round compiles: the op on a chain of
                        // `round` additions of zero.
                        let mut expr = Expr::Input(0);
                        for _ in 0..round + thread * 25 {
                            expr = Expr::Binary(
                                BinaryOp::Add,
                                Box::new(expr),
                                Box::new(Expr::Binary(
                                    BinaryOp::Sub,
                                    Box::new(Expr::Input(1)),
                                    Box::new(Expr::Input(1)),
                                )),
                            );
                        }
                        let spec = KernelSpec::Elementwise(ElementwiseKernel {
                            inputs: vec![crate::DType::F32; 2],
                            outputs: vec![(
                                crate::DType::F32,
                                Expr::Binary(op, Box::new(expr), Box::new(Expr::Input(1))),
                            )],
                            repeats: Vec::new(),
                        });
                        let plain = cache.compile(&binary(op, crate::DType::F32)).unwrap();
                        let chained = cache.compile(&spec).unwrap();
                        let a: Vec<f32> = (0..64).map(|i| i as f32 - 20.5).collect();
                        let b: Vec<f32> = (0..64).map(|i| (i * 7 % 13) as f32).collect();
                        let bytes = |v: &[f32]| -> Vec<u8> {
                            v.iter().flat_map(|x| x.to_le_bytes()).collect()
                        };
                        let (ab, bb) = (bytes(&a), bytes(&b));
                        for id in [plain, chained] {
                            let mut out = vec![0u8; 256];
                            cache
                                .table()
                                .get(id)
                                .run_elementwise(&[&ab, &bb], &mut [&mut out], 64)
                                .unwrap();
                            for (i, c) in out.chunks_exact(4).enumerate() {
                                let got = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                                assert_eq!(got, host(op, a[i], b[i]), "{op:?} thread {thread}");
                            }
                        }
                    }
                });
            }
        });
    }

    /// A kernel compiled by one shared cache is the same code in the next, which keeps it
    /// alive after the first drops; an own cache compiles its own.
    #[test]
    fn shared_caches_take_kernels_compiled_before() {
        let spec = add(crate::DType::F32);
        let mut first = crate::KernelCache::shared().unwrap();
        let a = first.compile(&spec).unwrap();
        let mut second = crate::KernelCache::shared().unwrap();
        let b = second.compile(&spec).unwrap();
        let code = |cache: &crate::KernelCache, id| cache.table().code_address(id);
        assert_eq!(code(&first, a), code(&second, b));
        let mut own = crate::KernelCache::new().unwrap();
        let c = own.compile(&spec).unwrap();
        assert_ne!(code(&own, c), code(&second, b));
        drop(first);
        // Still callable: 1 + 2 in the second cache after the first is gone.
        let (x, y) = (1f32.to_le_bytes(), 2f32.to_le_bytes());
        let mut out = [0u8; 4];
        second
            .table()
            .get(b)
            .run_elementwise(&[&x, &y], &mut [&mut out], 1)
            .unwrap();
        assert_eq!(f32::from_le_bytes(out), 3.0);
    }
}
