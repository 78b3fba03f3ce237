//! The Cranelift JIT: compiles kernels to host code, caches them by spec, and runs them on
//! byte buffers with every size checked first.
//!
//! Element-wise kernels whose values are all f32 run four lanes at a time, two vectors per
//! loop iteration, then a scalar tail; other kernels run a scalar loop. f16 is stored as
//! f16 but computed in f32: the run wrapper converts at the boundary with `half`'s F16C
//! slice conversions, so the generated code only sees f32.

use crate::CodegenError;
use crate::fp::FloatMode;
use crate::halves;
use crate::kernel::{DType, ElementwiseKernel, Expr, KernelSpec, ReduceKernel, ReduceOp};
use crate::lower::{ExprLowering, Helpers, clif_type, vectorizable};
use crate::reference::{self, Scalar};
pub use crate::shared_jit::KERNELS_PER_SHARED_MODULE;
use crate::shared_jit::SharedJit;
use crate::stages::Finish;
use crate::types::{check_elementwise, expr_type};
use cranelift_codegen::Context;
use cranelift_codegen::ir::{
    AbiParam, Function, InstBuilder, MemFlagsData, Signature, Type, Value, types,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module, default_libcall_names};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::Arc;

extern "C" fn host_fmod(a: f32, b: f32) -> f32 {
    a % b
}
extern "C" fn host_powi(a: i32, b: i32) -> i32 {
    match reference::binary_value(crate::BinaryOp::Pow, Scalar::S32(a), Scalar::S32(b)) {
        Scalar::S32(v) => v,
        _ => unreachable!("s32 pow returns s32"),
    }
}
extern "C" fn host_powu(a: u32, b: u32) -> u32 {
    match reference::binary_value(crate::BinaryOp::Pow, Scalar::U32(a), Scalar::U32(b)) {
        Scalar::U32(v) => v,
        _ => unreachable!("u32 pow returns u32"),
    }
}

/// The storage type the generated code sees (f16 arrives converted to f32).
fn jit_type(t: DType) -> DType {
    if t == DType::F16 { DType::F32 } else { t }
}

struct HelperIds {
    fmod: FuncId,
    powi: FuncId,
    powu: FuncId,
}

/// Owns the JIT module; compiles one kernel at a time.
pub(crate) struct Compiler {
    module: Option<JITModule>,
    ctx: Context,
    fctx: FunctionBuilderContext,
    helpers: HelperIds,
}

fn jit_error(e: impl std::fmt::Display) -> CodegenError {
    CodegenError::Jit(e.to_string())
}

impl Compiler {
    pub(crate) fn new() -> Result<Compiler, CodegenError> {
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").map_err(jit_error)?;
        flags
            .set("use_colocated_libcalls", "false")
            .map_err(jit_error)?;
        flags.set("is_pic", "false").map_err(jit_error)?;
        // The verifier checks the IR we build, at up to a third of the JIT's time: on in
        // debug builds (the test suite, CI), off in release builds (Wasmtime's default too).
        let verify = if cfg!(debug_assertions) {
            "true"
        } else {
            "false"
        };
        flags.set("enable_verifier", verify).map_err(jit_error)?;
        let isa = cranelift_native::builder()
            .map_err(jit_error)?
            .finish(settings::Flags::new(flags))
            .map_err(jit_error)?;
        let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
        builder.symbol("ipuxla_fmod", host_fmod as *const u8);
        builder.symbol("ipuxla_powi", host_powi as *const u8);
        builder.symbol("ipuxla_powu", host_powu as *const u8);
        let mut module = JITModule::new(builder);
        let mut declare = |name: &str, t: Type| -> Result<FuncId, CodegenError> {
            let mut sig = module.make_signature();
            sig.params.push(AbiParam::new(t));
            sig.params.push(AbiParam::new(t));
            sig.returns.push(AbiParam::new(t));
            module
                .declare_function(name, Linkage::Import, &sig)
                .map_err(jit_error)
        };
        let helpers = HelperIds {
            fmod: declare("ipuxla_fmod", types::F32)?,
            powi: declare("ipuxla_powi", types::I32)?,
            powu: declare("ipuxla_powu", types::I32)?,
        };
        let ctx = module.make_context();
        Ok(Compiler {
            module: Some(module),
            ctx,
            fctx: FunctionBuilderContext::new(),
            helpers,
        })
    }

    fn module(&mut self) -> &mut JITModule {
        self.module
            .as_mut()
            .expect("the module lives until the compiler drops")
    }

    /// Declares, defines and finalizes the function in `self.ctx`; returns its code.
    fn finish(&mut self) -> Result<*const u8, CodegenError> {
        let sig = self.ctx.func.signature.clone();
        let module = self
            .module
            .as_mut()
            .expect("the module lives until the compiler drops");
        let id = module.declare_anonymous_function(&sig).map_err(jit_error)?;
        module
            .define_function(id, &mut self.ctx)
            .map_err(|e| CodegenError::Jit(format!("{e:?}")))?;
        module.clear_context(&mut self.ctx);
        module.finalize_definitions().map_err(jit_error)?;
        Ok(module.get_finalized_function(id))
    }

    fn helper_refs(module: &mut JITModule, ids: &HelperIds, func: &mut Function) -> Helpers {
        Helpers {
            fmod: module.declare_func_in_func(ids.fmod, func),
            powi: module.declare_func_in_func(ids.powi, func),
            powu: module.declare_func_in_func(ids.powu, func),
        }
    }

    fn signature(&mut self, params: usize) -> Signature {
        let mut sig = self.module().make_signature();
        for _ in 0..params {
            sig.params.push(AbiParam::new(types::I64));
        }
        sig
    }

    pub(crate) fn elementwise(
        &mut self,
        kernel: &ElementwiseKernel,
    ) -> Result<*const u8, CodegenError> {
        let inputs: Vec<DType> = kernel.inputs.iter().map(|t| jit_type(*t)).collect();
        let outputs: Vec<(DType, &Expr)> = kernel
            .outputs
            .iter()
            .map(|(t, e)| (jit_type(*t), e))
            .collect();
        let vector = outputs
            .iter()
            .all(|(t, e)| *t == DType::F32 && vectorizable(e, &inputs));
        self.ctx.func.signature = self.signature(3);
        let frontend = self.module().target_config();
        let module = self
            .module
            .as_mut()
            .expect("the module lives until the compiler drops");
        let helpers = Self::helper_refs(module, &self.helpers, &mut self.ctx.func);
        let mut b = FunctionBuilder::new(&mut self.ctx.func, &mut self.fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let (ins, outs, n) = {
            let p = b.block_params(entry);
            (p[0], p[1], p[2])
        };
        let flags = MemFlagsData::new().with_notrap();
        let in_ptrs: Vec<Value> = (0..inputs.len())
            .map(|k| b.ins().load(types::I64, flags, ins, (k * 8) as i32))
            .collect();
        let out_ptrs: Vec<Value> = (0..outputs.len())
            .map(|k| b.ins().load(types::I64, flags, outs, (k * 8) as i32))
            .collect();
        let i = b.declare_var(types::I64);
        let zero = b.ins().iconst(types::I64, 0);
        b.def_var(i, zero);
        let used: Vec<bool> = (0..inputs.len())
            .map(|k| outputs.iter().any(|(_, e)| uses_input(e, k as u32)))
            .collect();
        let body = |b: &mut FunctionBuilder<'_>, i: Variable, lanes: u8, offset: i64| {
            let idx = b.use_var(i);
            let loaded: Vec<Option<Value>> = (0..inputs.len())
                .map(|k| {
                    used[k].then(|| {
                        let t = inputs[k];
                        let addr = element_address(b, in_ptrs[k], idx, offset, t.size());
                        b.ins().load(clif_type(t, lanes), flags, addr, 0)
                    })
                })
                .collect();
            let lowering = ExprLowering {
                inputs: &inputs,
                loaded: &loaded,
                helpers,
                lanes,
            };
            let values: Vec<Value> = outputs
                .iter()
                .map(|(_, e)| lowering.lower(b, e).0)
                .collect();
            for ((t, _), (v, ptr)) in outputs.iter().zip(values.into_iter().zip(&out_ptrs)) {
                let addr = element_address(b, *ptr, idx, offset, t.size());
                b.ins().store(flags, v, addr, 0);
            }
        };
        let scalar_header = b.create_block();
        let scalar_body = b.create_block();
        let exit = b.create_block();
        if vector {
            // Two f32x4 bodies per iteration while 8 elements remain.
            let header = b.create_block();
            let vbody = b.create_block();
            b.ins().jump(header, &[]);
            b.switch_to_block(header);
            let idx = b.use_var(i);
            let next = b.ins().iadd_imm_s(idx, 8);
            let fits = b.ins().icmp(
                cranelift_codegen::ir::condcodes::IntCC::UnsignedLessThanOrEqual,
                next,
                n,
            );
            b.ins().brif(fits, vbody, &[], scalar_header, &[]);
            b.switch_to_block(vbody);
            body(&mut b, i, 4, 0);
            body(&mut b, i, 4, 4);
            let idx = b.use_var(i);
            let next = b.ins().iadd_imm_s(idx, 8);
            b.def_var(i, next);
            b.ins().jump(header, &[]);
        } else {
            b.ins().jump(scalar_header, &[]);
        }
        b.switch_to_block(scalar_header);
        let idx = b.use_var(i);
        let more = b.ins().icmp(
            cranelift_codegen::ir::condcodes::IntCC::UnsignedLessThan,
            idx,
            n,
        );
        b.ins().brif(more, scalar_body, &[], exit, &[]);
        b.switch_to_block(scalar_body);
        body(&mut b, i, 1, 0);
        let idx = b.use_var(i);
        let next = b.ins().iadd_imm_s(idx, 1);
        b.def_var(i, next);
        b.ins().jump(scalar_header, &[]);
        b.switch_to_block(exit);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(frontend);
        self.finish()
    }

    fn reduce(&mut self, kernel: &ReduceKernel) -> Result<*const u8, CodegenError> {
        let input = jit_type(kernel.input);
        let partial = kernel.partial_type();
        let op = kernel.op;
        let lanes = if partial == DType::Pred { 1 } else { 4 };
        self.ctx.func.signature = self.signature(4);
        let frontend = self.module().target_config();
        let mut b = FunctionBuilder::new(&mut self.ctx.func, &mut self.fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let (src, dst, run_length, runs) = {
            let p = b.block_params(entry);
            (p[0], p[1], p[2], p[3])
        };
        let flags = MemFlagsData::new().with_notrap();
        let r = b.declare_var(types::I64);
        let j = b.declare_var(types::I64);
        let acc = b.declare_var(clif_type(partial, 1));
        let vacc = b.declare_var(clif_type(partial, lanes));
        let zero = b.ins().iconst(types::I64, 0);
        b.def_var(r, zero);
        let (run_header, run_body, vheader, vbody, sheader, sbody, run_end, exit) = (
            b.create_block(),
            b.create_block(),
            b.create_block(),
            b.create_block(),
            b.create_block(),
            b.create_block(),
            b.create_block(),
            b.create_block(),
        );
        b.ins().jump(run_header, &[]);
        b.switch_to_block(run_header);
        let rv = b.use_var(r);
        let more = b.ins().icmp(
            cranelift_codegen::ir::condcodes::IntCC::UnsignedLessThan,
            rv,
            runs,
        );
        b.ins().brif(more, run_body, &[], exit, &[]);

        b.switch_to_block(run_body);
        let rv = b.use_var(r);
        let run_elems = b.ins().imul(rv, run_length);
        let run_bytes = b.ins().imul_imm_s(run_elems, input.size() as i64);
        let base = b.ins().iadd(src, run_bytes);
        let id = identity_value(&mut b, op, partial, lanes);
        b.def_var(vacc, id);
        b.def_var(j, zero);
        b.ins().jump(vheader, &[]);

        b.switch_to_block(vheader);
        let jv = b.use_var(j);
        let next = b.ins().iadd_imm_s(jv, lanes as i64);
        let fits = b.ins().icmp(
            cranelift_codegen::ir::condcodes::IntCC::UnsignedLessThanOrEqual,
            next,
            run_length,
        );
        let lanes_done = b.create_block();
        b.ins().brif(fits, vbody, &[], lanes_done, &[]);

        b.switch_to_block(vbody);
        let jv = b.use_var(j);
        let addr = element_address(&mut b, base, jv, 0, input.size());
        let x = b.ins().load(clif_type(input, lanes), flags, addr, 0);
        let a = b.use_var(vacc);
        let combined = combine(&mut b, op, partial, a, x);
        b.def_var(vacc, combined);
        let next = b.ins().iadd_imm_s(jv, lanes as i64);
        b.def_var(j, next);
        b.ins().jump(vheader, &[]);

        // Lanes combine as (l0 ∘ l1) ∘ (l2 ∘ l3), the order the reference defines.
        b.switch_to_block(lanes_done);
        let a = b.use_var(vacc);
        let folded = if lanes == 4 {
            let l: Vec<Value> = (0..4).map(|k| b.ins().extractlane(a, k as u8)).collect();
            let left = combine(&mut b, op, partial, l[0], l[1]);
            let right = combine(&mut b, op, partial, l[2], l[3]);
            combine(&mut b, op, partial, left, right)
        } else {
            a
        };
        b.def_var(acc, folded);
        b.ins().jump(sheader, &[]);

        b.switch_to_block(sheader);
        let jv = b.use_var(j);
        let more = b.ins().icmp(
            cranelift_codegen::ir::condcodes::IntCC::UnsignedLessThan,
            jv,
            run_length,
        );
        b.ins().brif(more, sbody, &[], run_end, &[]);

        b.switch_to_block(sbody);
        let jv = b.use_var(j);
        let addr = element_address(&mut b, base, jv, 0, input.size());
        let x = b.ins().load(clif_type(input, 1), flags, addr, 0);
        let a = b.use_var(acc);
        let combined = combine(&mut b, op, partial, a, x);
        b.def_var(acc, combined);
        let next = b.ins().iadd_imm_s(jv, 1);
        b.def_var(j, next);
        b.ins().jump(sheader, &[]);

        b.switch_to_block(run_end);
        let rv = b.use_var(r);
        let out_off = b.ins().imul_imm_s(rv, partial.size() as i64);
        let out_addr = b.ins().iadd(dst, out_off);
        let mut a = b.use_var(acc);
        if let Some(bits) = kernel.init {
            let init = scalar_value(&mut b, reference::scalar_of_bits(partial, bits));
            a = combine(&mut b, op, partial, a, init);
        }
        b.ins().store(flags, a, out_addr, 0);
        let next = b.ins().iadd_imm_s(rv, 1);
        b.def_var(r, next);
        b.ins().jump(run_header, &[]);

        b.switch_to_block(exit);
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(frontend);
        self.finish()
    }
}

impl Compiler {
    /// C (m×n) = A (m×k) · B (k×n), f32, row-major: 4 rows × 8 columns at a time in eight
    /// f32x4 accumulators (register blocking), scalar loops for the edges.
    pub(crate) fn matmul(
        &mut self,
        k: &crate::kernel::MatMulKernel,
    ) -> Result<*const u8, CodegenError> {
        use cranelift_codegen::ir::condcodes::IntCC;
        let (m, kk, n) = (k.m as i64, k.k as i64, k.n as i64);
        let (m4, n8) = (m / 4 * 4, n / 8 * 8);
        self.ctx.func.signature = self.signature(3);
        let frontend = self.module().target_config();
        let mut b = FunctionBuilder::new(&mut self.ctx.func, &mut self.fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let (pa, pb, pc) = {
            let p = b.block_params(entry);
            (p[0], p[1], p[2])
        };
        let flags = MemFlagsData::new().with_notrap();
        // A counted loop `for v in start..end step` around `body`.
        fn counted(
            b: &mut FunctionBuilder<'_>,
            v: Variable,
            start: i64,
            end: i64,
            step: i64,
            body: &mut dyn FnMut(&mut FunctionBuilder<'_>),
        ) {
            let header = b.create_block();
            let block = b.create_block();
            let done = b.create_block();
            let s = b.ins().iconst(types::I64, start);
            b.def_var(v, s);
            b.ins().jump(header, &[]);
            b.switch_to_block(header);
            let cur = b.use_var(v);
            let more = b.ins().icmp_imm_s(IntCC::SignedLessThan, cur, end);
            b.ins().brif(more, block, &[], done, &[]);
            b.switch_to_block(block);
            body(b);
            let cur = b.use_var(v);
            let next = b.ins().iadd_imm_s(cur, step);
            b.def_var(v, next);
            b.ins().jump(header, &[]);
            b.switch_to_block(done);
        }
        let addr = |b: &mut FunctionBuilder<'_>, base: Value, index: Value| {
            let bytes = b.ins().imul_imm_s(index, 4);
            b.ins().iadd(base, bytes)
        };
        let (vi, vj, vp) = (
            b.declare_var(types::I64),
            b.declare_var(types::I64),
            b.declare_var(types::I64),
        );
        let accs: Vec<Variable> = (0..8).map(|_| b.declare_var(types::F32X4)).collect();
        let sacc = b.declare_var(types::F32);
        // Blocked region: rows 0..m4, columns 0..n8.
        counted(&mut b, vi, 0, m4, 4, &mut |b| {
            counted(b, vj, 0, n8, 8, &mut |b| {
                let zero = b.ins().f32const(0.0);
                let zv = b.ins().splat(types::F32X4, zero);
                for a in &accs {
                    b.def_var(*a, zv);
                }
                counted(b, vp, 0, kk, 1, &mut |b| {
                    let (i, j, p) = (b.use_var(vi), b.use_var(vj), b.use_var(vp));
                    let row = b.ins().imul_imm_s(p, n);
                    let bj = b.ins().iadd(row, j);
                    let bptr = addr(b, pb, bj);
                    let b0 = b.ins().load(types::F32X4, flags, bptr, 0);
                    let b1 = b.ins().load(types::F32X4, flags, bptr, 16);
                    for r in 0..4 {
                        let ir = b.ins().iadd_imm_s(i, r);
                        let arow = b.ins().imul_imm_s(ir, kk);
                        let ai = b.ins().iadd(arow, p);
                        let aptr = addr(b, pa, ai);
                        let av = b.ins().load(types::F32, flags, aptr, 0);
                        let avv = b.ins().splat(types::F32X4, av);
                        for (h, bv) in [b0, b1].into_iter().enumerate() {
                            let acc = accs[(r * 2) as usize + h];
                            let cur = b.use_var(acc);
                            let prod = b.ins().fmul(avv, bv);
                            let next = b.ins().fadd(cur, prod);
                            b.def_var(acc, next);
                        }
                    }
                });
                let (i, j) = (b.use_var(vi), b.use_var(vj));
                for r in 0..4 {
                    let ir = b.ins().iadd_imm_s(i, r);
                    let crow = b.ins().imul_imm_s(ir, n);
                    let ci = b.ins().iadd(crow, j);
                    let cptr = addr(b, pc, ci);
                    for h in 0..2 {
                        let v = b.use_var(accs[(r * 2) as usize + h]);
                        b.ins().store(flags, v, cptr, (h * 16) as i32);
                    }
                }
            });
        });
        // Scalar edges: columns n8..n of the blocked rows, then every column of rows m4..m.
        let scalar_dot = |b: &mut FunctionBuilder<'_>, rows: (i64, i64), cols: (i64, i64)| {
            counted(b, vi, rows.0, rows.1, 1, &mut |b| {
                counted(b, vj, cols.0, cols.1, 1, &mut |b| {
                    let zero = b.ins().f32const(0.0);
                    b.def_var(sacc, zero);
                    counted(b, vp, 0, kk, 1, &mut |b| {
                        let (i, j, p) = (b.use_var(vi), b.use_var(vj), b.use_var(vp));
                        let arow = b.ins().imul_imm_s(i, kk);
                        let ai = b.ins().iadd(arow, p);
                        let aptr = addr(b, pa, ai);
                        let av = b.ins().load(types::F32, flags, aptr, 0);
                        let brow = b.ins().imul_imm_s(p, n);
                        let bi = b.ins().iadd(brow, j);
                        let bptr = addr(b, pb, bi);
                        let bv = b.ins().load(types::F32, flags, bptr, 0);
                        let cur = b.use_var(sacc);
                        let prod = b.ins().fmul(av, bv);
                        let next = b.ins().fadd(cur, prod);
                        b.def_var(sacc, next);
                    });
                    let (i, j) = (b.use_var(vi), b.use_var(vj));
                    let crow = b.ins().imul_imm_s(i, n);
                    let ci = b.ins().iadd(crow, j);
                    let cptr = addr(b, pc, ci);
                    let v = b.use_var(sacc);
                    b.ins().store(flags, v, cptr, 0);
                });
            });
        };
        scalar_dot(&mut b, (0, m4), (n8, n));
        scalar_dot(&mut b, (m4, m), (0, n));
        b.ins().return_(&[]);
        b.seal_all_blocks();
        b.finalize(frontend);
        self.finish()
    }
}

/// Type-checks `spec` and compiles it with `compiler` under `mode` (see
/// [`KernelCache::compile_with`]).
pub(crate) fn compile_entry(
    compiler: &mut Compiler,
    spec: &KernelSpec,
    mode: FloatMode,
) -> Result<Entry, CodegenError> {
    let mut status = false;
    let mut esr = None;
    let mut stages = Vec::new();
    let code = match spec {
        KernelSpec::Elementwise(k) => {
            check_elementwise(k)?;
            let (run, checked) = crate::fp::guarded(k, mode);
            status = checked;
            esr = mode.esr;
            check_elementwise(&run)?;
            // Rounded f16 values inside a fused expression, and transcendental ops where the
            // host has AVX-512 or AVX2 with FMA: in stages, finished between them (`stages`), unless a
            // status or stochastic rounding is to be computed too (then all is inline:
            // `math::round_to_f16`, the routines on Cranelift's lanes).
            let wide = crate::wide_math::available();
            match crate::stages::split(&run, wide).filter(|_| !status && esr.is_none()) {
                Some(staged) => {
                    for (stage, &finish) in staged.stages.iter().zip(&staged.finishes) {
                        check_elementwise(stage)?;
                        stages.push((CodePtr(compiler.elementwise(stage)?), finish));
                    }
                    check_elementwise(&staged.last)?;
                    Code::Jit(CodePtr(compiler.elementwise(&staged.last)?))
                }
                None => Code::Jit(CodePtr(compiler.elementwise(&run)?)),
            }
        }
        KernelSpec::Reduce(k) => {
            check_reduce(k)?;
            Code::Jit(CodePtr(compiler.reduce(k)?))
        }
        KernelSpec::MatMul(k) => {
            if !k.input.is_float() {
                return Err(CodegenError::Type(format!(
                    "matrix products take f32 or f16 operands, not {:?}",
                    k.input
                )));
            }
            let partials_fit =
                k.partials == DType::F32 || (k.partials == DType::F16 && k.input == DType::F16);
            if !partials_fit {
                return Err(CodegenError::Type(format!(
                    "{:?} partials of {:?} operands: partials are f32, or f16 for f16 operands",
                    k.partials, k.input
                )));
            }
            Code::NativeMatMul
        }
    };
    let plain = match spec {
        KernelSpec::Elementwise(k) => {
            let f16 = (k.inputs.iter())
                .chain(k.outputs.iter().map(|(t, _)| t))
                .any(|t| *t == DType::F16);
            // Stages without f16 operands are transcendental ops, and repeated inputs are
            // expanded a chunk at a time: a plain call runs both.
            !f16 && !status && esr.is_none() && matches!(code, Code::Jit(_))
        }
        _ => false,
    };
    Ok(Entry {
        spec: spec.clone(),
        code,
        stages,
        status,
        esr,
        plain,
    })
}

impl Drop for Compiler {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: every function pointer handed out borrows a cache that owns this
            // compiler or holds the `SharedJit` owning it (`CompiledKernel<'_>`), so none
            // outlives the code freed here.
            unsafe { module.free_memory() };
        }
    }
}

fn uses_input(expr: &Expr, k: u32) -> bool {
    match expr {
        Expr::Input(i) => *i == k,
        Expr::Unary(_, x) | Expr::Convert(_, x) => uses_input(x, k),
        Expr::Binary(_, a, b) | Expr::Compare(_, a, b) => uses_input(a, k) || uses_input(b, k),
        Expr::Select(a, b, c) | Expr::Clamp(a, b, c) => {
            uses_input(a, k) || uses_input(b, k) || uses_input(c, k)
        }
        _ => false,
    }
}

fn element_address(
    b: &mut FunctionBuilder<'_>,
    base: Value,
    index: Value,
    offset: i64,
    size: usize,
) -> Value {
    let at = b.ins().iadd_imm_s(index, offset);
    let bytes = b.ins().imul_imm_s(at, size as i64);
    b.ins().iadd(base, bytes)
}

fn scalar_value(b: &mut FunctionBuilder<'_>, scalar: Scalar) -> Value {
    match scalar {
        Scalar::F32(v) => b.ins().f32const(v),
        Scalar::S32(v) => b.ins().iconst(types::I32, v as i64),
        Scalar::U32(v) => b.ins().iconst(types::I32, v as i64),
        Scalar::Pred(v) => b.ins().iconst(types::I8, v as i64),
    }
}

fn identity_value(b: &mut FunctionBuilder<'_>, op: ReduceOp, t: DType, lanes: u8) -> Value {
    let scalar = scalar_value(b, reference::identity(op, t));
    if lanes == 4 {
        b.ins().splat(clif_type(t, 4), scalar)
    } else {
        scalar
    }
}

fn combine(b: &mut FunctionBuilder<'_>, op: ReduceOp, t: DType, x: Value, y: Value) -> Value {
    let signed = t == DType::S32;
    match (op, t) {
        (ReduceOp::Sum, DType::F32) => b.ins().fadd(x, y),
        (ReduceOp::Product, DType::F32) => b.ins().fmul(x, y),
        (ReduceOp::Max, DType::F32) => b.ins().fmax(x, y),
        (ReduceOp::Min, DType::F32) => b.ins().fmin(x, y),
        (ReduceOp::Sum, _) => b.ins().iadd(x, y),
        (ReduceOp::Product, _) => b.ins().imul(x, y),
        (ReduceOp::Max, DType::Pred) | (ReduceOp::Or, _) => b.ins().bor(x, y),
        (ReduceOp::Min, DType::Pred) | (ReduceOp::And, _) => b.ins().band(x, y),
        (ReduceOp::Max, _) => {
            if signed {
                b.ins().smax(x, y)
            } else {
                b.ins().umax(x, y)
            }
        }
        (ReduceOp::Min, _) => {
            if signed {
                b.ins().smin(x, y)
            } else {
                b.ins().umin(x, y)
            }
        }
    }
}

/// Checks a reduction's op against its input type.
fn check_reduce(kernel: &ReduceKernel) -> Result<(), CodegenError> {
    let ok = match kernel.op {
        ReduceOp::And | ReduceOp::Or => !kernel.input.is_float(),
        ReduceOp::Sum | ReduceOp::Product => kernel.input != DType::Pred,
        ReduceOp::Max | ReduceOp::Min => true,
    };
    if ok {
        Ok(())
    } else {
        Err(CodegenError::Type(format!(
            "{:?} does not apply to {:?}",
            kernel.op, kernel.input
        )))
    }
}

/// Identifies a compiled kernel in its cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelId(pub u32);

/// How a kernel runs: JIT-compiled code, or the native matrix-product codelet.
#[derive(Clone, Copy)]
enum Code {
    Jit(CodePtr),
    JitMatMul(CodePtr),
    NativeMatMul,
}

#[derive(Clone, Copy)]
struct CodePtr(*const u8);

// SAFETY: the pointer is to finalized, immutable machine code that stays mapped until the
// module holding it is freed (a `KernelCache`'s own, or a `SharedJit` every cache holding
// the pointer keeps alive); calling it from several threads at once is sound because the
// code keeps no state of its own (it reads and writes only the buffers passed in).
unsafe impl Send for CodePtr {}
unsafe impl Sync for CodePtr {}

/// A compiled kernel in its table: the spec as written, its code, and how the code was
/// guarded (see [`crate::fp`]).
#[derive(Clone)]
pub(crate) struct Entry {
    spec: KernelSpec,
    code: Code,
    /// An element-wise kernel split in stages ([`crate::stages`]): the code of each and
    /// what finishes its chunk, run before `code` (the last stage) on each chunk.
    stages: Vec<(CodePtr, Finish)>,
    /// The code writes a status output after the spec's outputs.
    status: bool,
    /// f16 outputs round stochastically with this seed.
    esr: Option<u64>,
    /// An element-wise kernel without f16 operands, status or stochastic rounding: its
    /// code can be called straight ([`PlainElementwise`]).
    plain: bool,
}

/// Compiled kernels, shareable across threads (what an engine runs).
pub struct KernelTable {
    entries: Vec<Entry>,
}

/// A compiled kernel, borrowed from its table.
pub struct CompiledKernel<'t> {
    spec: &'t KernelSpec,
    code: &'t Code,
    stages: &'t [(CodePtr, Finish)],
    status: bool,
    esr: Option<u64>,
    plain: bool,
}

impl KernelTable {
    /// The kernel with this id.
    pub fn get(&self, id: KernelId) -> CompiledKernel<'_> {
        let e = &self.entries[id.0 as usize];
        CompiledKernel {
            spec: &e.spec,
            code: &e.code,
            stages: &e.stages,
            status: e.status,
            esr: e.esr,
            plain: e.plain,
        }
    }

    /// Where the kernel's code starts (null for the native matrix product).
    #[cfg(test)]
    pub(crate) fn code_address(&self, id: KernelId) -> usize {
        match self.entries[id.0 as usize].code {
            Code::Jit(CodePtr(p)) | Code::JitMatMul(CodePtr(p)) => p as usize,
            Code::NativeMatMul => 0,
        }
    }

    /// Number of compiled kernels.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is compiled.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Compiles kernels once per distinct spec and keeps them until dropped (which frees the
/// code with Cranelift's `free_memory`, or lets the shared module go, see
/// [`KernelCache::shared`]).
pub struct KernelCache {
    jit: Jit,
    index: HashMap<FloatMode, HashMap<KernelSpec, KernelId>>,
    table: KernelTable,
}

/// The JIT module a cache compiles into.
enum Jit {
    /// Its own, freed with it (boxed: a compiler's contexts take 8 KiB).
    Own(Box<Compiler>),
    /// One shared with the process's other shared caches.
    Shared(Arc<SharedJit>),
}

impl KernelCache {
    /// A cache compiling for this machine (host ISA with its detected CPU features) into a
    /// module of its own.
    pub fn new() -> Result<KernelCache, CodegenError> {
        Ok(KernelCache::with(Jit::Own(Box::new(Compiler::new()?))))
    }

    /// A cache compiling into the process's shared module: a kernel another shared cache
    /// compiled there is taken, not compiled again (an engine's kernels mostly repeat
    /// those of the engines loaded before it: 95 % of the differential campaign's). The
    /// module's code lives while any cache holding it does; a module that has compiled
    /// [`KERNELS_PER_SHARED_MODULE`] kernels takes no new caches, so the process keeps at
    /// most that many kernels' code beside the ones live caches hold.
    pub fn shared() -> Result<KernelCache, CodegenError> {
        Ok(KernelCache::with(Jit::Shared(SharedJit::current()?)))
    }

    fn with(jit: Jit) -> KernelCache {
        KernelCache {
            jit,
            index: HashMap::new(),
            table: KernelTable {
                entries: Vec::new(),
            },
        }
    }

    /// Type-checks and compiles `spec`, or returns the id it already has.
    pub fn compile(&mut self, spec: &KernelSpec) -> Result<KernelId, CodegenError> {
        self.compile_with(spec, FloatMode::default())
    }

    /// [`KernelCache::compile`] under a floating-point mode: element-wise kernels are
    /// guarded ([`crate::fp::guarded`]); other kernels compile as written.
    pub fn compile_with(
        &mut self,
        spec: &KernelSpec,
        mode: FloatMode,
    ) -> Result<KernelId, CodegenError> {
        // Looked up by reference: a spec is cloned only when it is new here.
        if let Some(id) = self.index.get(&mode).and_then(|specs| specs.get(spec)) {
            return Ok(*id);
        }
        let entry = match &mut self.jit {
            Jit::Own(compiler) => compile_entry(compiler, spec, mode)?,
            Jit::Shared(shared) => shared.entry(spec, mode)?,
        };
        let id = KernelId(self.table.entries.len() as u32);
        self.table.entries.push(entry);
        (self.index.entry(mode).or_default()).insert(spec.clone(), id);
        Ok(id)
    }

    /// Compiles the JIT's register-blocked matrix product for `k`. [`KernelCache::compile`]
    /// uses the `gemm` codelet instead, which measured faster on this machine; this one is
    /// kept to measure against it and as the fallback the tests cross-check.
    pub fn compile_jit_matmul(
        &mut self,
        k: &crate::kernel::MatMulKernel,
    ) -> Result<KernelId, CodegenError> {
        if !k.input.is_float() {
            return Err(CodegenError::Type(format!(
                "matrix products take f32 or f16 operands, not {:?}",
                k.input
            )));
        }
        let code = match &mut self.jit {
            Jit::Own(compiler) => compiler.matmul(k)?,
            Jit::Shared(shared) => shared.with_compiler(|c| c.matmul(k))??,
        };
        let id = KernelId(self.table.entries.len() as u32);
        self.table.entries.push(Entry {
            spec: KernelSpec::MatMul(k.clone()),
            code: Code::JitMatMul(CodePtr(code)),
            stages: Vec::new(),
            status: false,
            esr: None,
            plain: false,
        });
        Ok(id)
    }

    /// The compiled kernels.
    pub fn table(&self) -> &KernelTable {
        &self.table
    }
}

/// Fills `out` with elements `first..first + out.len()` of an input whose every element is
/// repeated `repeat` times (element i is `src`'s element i / repeat), as the generated code
/// reads them: f16 widened to f32, other types as they are stored.
fn expand_repeated(src: &[u8], t: DType, repeat: usize, first: usize, out: &mut [f32]) {
    let len = out.len();
    let size = t.size();
    let mut j = 0;
    while j < len {
        let e = (first + j) / repeat;
        let end = ((e + 1) * repeat - first).min(len);
        let x = &src[e * size..(e + 1) * size];
        match t {
            DType::F16 => {
                out[j..end].fill(half::f16::from_bits(u16::from_le_bytes([x[0], x[1]])).to_f32())
            }
            // The element's bits, whatever its 32-bit type (a fill, not a copy per element).
            _ if size == 4 => {
                out[j..end].fill(f32::from_bits(u32::from_le_bytes([x[0], x[1], x[2], x[3]])))
            }
            _ => {
                let bytes = f32_bytes_mut(out);
                for b in bytes[j * size..end * size].chunks_exact_mut(size) {
                    b.copy_from_slice(x);
                }
            }
        }
        j = end;
    }
}

/// Writes f32 values as f16 bytes (round to nearest even).
fn narrow(values: &[f32], bytes: &mut [u8]) {
    halves::narrow_into(values, bytes);
}

/// `values` seen as their bytes (the host is little-endian, as the device: callers check).
fn f32_bytes_mut(values: &mut [f32]) -> &mut [u8] {
    // SAFETY: the bytes of an f32 slice: same memory and lifetime, u8 needs no alignment
    // and every byte written leaves a valid f32.
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr() as *mut u8, values.len() * 4) }
}

thread_local! {
    /// Per host thread: the f32 copies of a matrix product's operands, reused from one
    /// vertex to the next (a run multiplies on hundreds of thousands of vertices).
    static OPERANDS: std::cell::Cell<[Vec<f32>; 2]> = Default::default();
    /// Per host thread: the f32 chunks of an element-wise kernel's f16 operands, and a
    /// reduction's f16 input widened.
    static WIDE: std::cell::Cell<Vec<f32>> = Default::default();
}

/// The first element whose status has an exception bit (element numbers from `start`).
fn first_exception(status: &[u32], start: usize) -> Result<(), CodegenError> {
    match status.iter().position(|&s| s != 0) {
        None => Ok(()),
        Some(i) => {
            let (exception, output) = crate::fp::FpException::from_status(status[i])
                .expect("a nonzero status has an exception bit");
            Err(CodegenError::FloatingPoint {
                exception,
                output,
                element: start + i,
            })
        }
    }
}

fn size_error(what: &str, k: usize, have: usize, need: usize) -> CodegenError {
    CodegenError::Type(format!(
        "{what} {k} holds {have} bytes but the kernel needs {need}"
    ))
}

/// A reduction's code, called straight: no f16 input to widen, no sizes to check
/// ([`CompiledKernel::plain_reduce`]). A reduction's first stage is thousands of vertices of
/// a few dozen elements a compute set.
#[derive(Clone, Copy)]
pub struct PlainReduce<'t> {
    code: extern "C" fn(*const u8, *mut u8, u64, u64),
    /// The code lives as long as its table.
    table: std::marker::PhantomData<&'t KernelTable>,
}

impl PlainReduce<'_> {
    /// Reduces `runs` runs of `run_length` input elements at `input` into `runs` partials
    /// at `output`.
    ///
    /// # Safety
    /// `input` addresses `run_length * runs` elements of the kernel's input type, valid for
    /// reads, and `output` `runs` partials of its partial type, valid for writes and not
    /// overlapping the input.
    pub unsafe fn call(&self, input: *const u8, output: *mut u8, run_length: usize, runs: usize) {
        (self.code)(input, output, run_length as u64, runs as u64)
    }
}

/// An element-wise kernel's code, called straight: no f16 operand to convert, no
/// floating-point status to read, no stochastic rounding to seed
/// ([`CompiledKernel::plain_elementwise`]). A tile's share of an element-wise op is often a
/// few dozen elements, so what [`CompiledKernel::run_elementwise`] checks and sets up on
/// every call cost the host more than the arithmetic.
#[derive(Clone, Copy)]
pub struct PlainElementwise<'t> {
    code: extern "C" fn(*const *const u8, *const *mut u8, u64),
    inputs: usize,
    outputs: usize,
    /// A kernel split at transcendental ops ([`crate::stages`]) or reading an input
    /// repeated (a broadcast read in place): its stages, run on each chunk before `code`,
    /// and the kernel, for its operands' element sizes and repeats; such a kernel runs a
    /// chunk at a time.
    chunked: Option<(&'t [(CodePtr, Finish)], &'t ElementwiseKernel)>,
    /// The code lives as long as its table.
    table: std::marker::PhantomData<&'t KernelTable>,
}

impl PlainElementwise<'_> {
    /// Runs the kernel on `n` elements.
    ///
    /// # Safety
    /// `ins` and `outs` hold one pointer per input and output of the kernel (checked), each
    /// addressing at least `n` elements of that operand's type (a repeated input
    /// `ElementwiseKernel::input_len` of them), valid for reads (inputs) or writes
    /// (outputs) for the call; no output overlaps an input or another output.
    pub unsafe fn call(&self, ins: &[*const u8], outs: &[*mut u8], n: usize) {
        assert!(
            ins.len() == self.inputs && outs.len() == self.outputs,
            "one pointer per operand"
        );
        match self.chunked {
            None => (self.code)(ins.as_ptr(), outs.as_ptr(), n as u64),
            // SAFETY: as the caller promises for the operands.
            Some(([], k)) if n <= SMALL_REPEATED => unsafe { self.call_small(k, ins, outs, n) },
            // SAFETY: as the caller promises for the operands; the stages are this kernel's.
            Some((stages, k)) => unsafe { self.call_chunked(stages, k, ins, outs, n) },
        }
    }

    /// [`PlainElementwise::call`] of a kernel without stages, with repeated inputs, on at
    /// most [`SMALL_REPEATED`] elements (a tile's share of a broadcast's reader: the
    /// encoder's LayerNorms read each row's mean on 1 024 tiles, 32 elements each): each
    /// repeated input expanded on the stack, one call.
    ///
    /// # Safety
    /// As for [`PlainElementwise::call`]; `n <= SMALL_REPEATED`.
    unsafe fn call_small(
        &self,
        k: &ElementwiseKernel,
        ins: &[*const u8],
        outs: &[*mut u8],
        n: usize,
    ) {
        let mut expanded = [[0f32; SMALL_REPEATED]; SMALL_EXPANDED];
        let mut slots = expanded.iter_mut();
        let mut call_ins = [std::ptr::null::<u8>(); SMALL_INPUTS];
        if ins.len() > SMALL_INPUTS {
            // SAFETY: as the caller promises; no stages.
            return unsafe { self.call_chunked(&[], k, ins, outs, n) };
        }
        for (i, (&p, &t)) in ins.iter().zip(&k.inputs).enumerate() {
            let r = k.repeat(i);
            call_ins[i] = if r > 1 {
                let Some(slot) = slots.next() else {
                    // SAFETY: as the caller promises; no stages.
                    return unsafe { self.call_chunked(&[], k, ins, outs, n) };
                };
                // SAFETY: the caller promises `k.input_len(i, n)` elements of `t` at `p`.
                let src = unsafe { std::slice::from_raw_parts(p, k.input_len(i, n) * t.size()) };
                expand_repeated(src, t, r, 0, &mut slot[..n]);
                slot.as_ptr() as *const u8
            } else {
                p
            };
        }
        (self.code)(call_ins.as_ptr(), outs.as_ptr(), n as u64)
    }

    /// [`PlainElementwise::call`] of a kernel in stages or with repeated inputs: chunk by
    /// chunk, each repeated input's chunk expanded into its slot of the thread's reused
    /// buffer, each stage into its own slot, finished in place, then the last stage.
    ///
    /// # Safety
    /// As for [`PlainElementwise::call`], a repeated input `i` addressing at least
    /// `k.input_len(i, n)` elements; `stages` are `k`'s.
    unsafe fn call_chunked(
        &self,
        stages: &[(CodePtr, Finish)],
        k: &ElementwiseKernel,
        ins: &[*const u8],
        outs: &[*mut u8],
        n: usize,
    ) {
        let chunk = CHUNK.min(n);
        let repeated = (0..k.inputs.len()).filter(|&i| k.repeat(i) > 1).count();
        let slots = stages.len() + repeated;
        let mut wide = WIDE.take();
        if wide.len() < slots * chunk {
            wide.resize(slots * chunk, 0.0);
        }
        let (stage_part, repeat_part) = wide[..slots * chunk].split_at_mut(stages.len() * chunk);
        let stage_ptrs: SmallVec<[*mut u8; 8]> = (stage_part.chunks_mut(chunk))
            .map(|s| s.as_mut_ptr() as *mut u8)
            .collect();
        let mut repeat_slots: SmallVec<[&mut [f32]; 4]> = repeat_part.chunks_mut(chunk).collect();
        let mut chunk_ins: SmallVec<[*const u8; 16]> = SmallVec::new();
        let mut chunk_outs: SmallVec<[*mut u8; 4]> = SmallVec::new();
        let mut start = 0;
        while start < n {
            let len = CHUNK.min(n - start);
            chunk_ins.clear();
            chunk_outs.clear();
            let mut slot = 0;
            for (i, (&p, &t)) in ins.iter().zip(&k.inputs).enumerate() {
                let r = k.repeat(i);
                if r > 1 {
                    // SAFETY: the caller promises `k.input_len(i, n)` elements of `t` at `p`.
                    let src =
                        unsafe { std::slice::from_raw_parts(p, k.input_len(i, n) * t.size()) };
                    let out = &mut repeat_slots[slot][..len];
                    expand_repeated(src, t, r, start, out);
                    chunk_ins.push(out.as_ptr() as *const u8);
                    slot += 1;
                } else {
                    // SAFETY: `start < n`, so the pointer moved by `start` elements of its
                    // operand's type stays inside what the caller promised.
                    chunk_ins.push(unsafe { p.add(start * t.size()) });
                }
            }
            chunk_outs.extend(
                // SAFETY: as above, for the outputs' `n` elements.
                (outs.iter().zip(&k.outputs)).map(|(p, (t, _))| unsafe { p.add(start * t.size()) }),
            );
            chunk_ins.extend(stage_ptrs.iter().map(|p| *p as *const u8));
            // SAFETY: the pointers address `len` elements of each operand and the stages'
            // chunks (`chunk` ≥ `len` f32 values each).
            unsafe { run_stages(stages, &chunk_ins, &stage_ptrs, len) };
            (self.code)(chunk_ins.as_ptr(), chunk_outs.as_ptr(), len as u64);
            start += len;
        }
        drop(repeat_slots);
        WIDE.set(wide);
    }
}

/// Element-wise kernels in stages, f16 operands and repeated inputs run in chunks of this
/// many elements (each stage's chunk stays in the L1 cache for the next).
const CHUNK: usize = 2048;

/// A call of a kernel with repeated inputs on at most this many elements expands them on
/// the stack ([`PlainElementwise::call_small`]): a tile's share of a small tensor.
const SMALL_REPEATED: usize = 128;

/// Repeated inputs [`PlainElementwise::call_small`] expands on the stack (more: chunked).
const SMALL_EXPANDED: usize = 2;

/// Inputs [`PlainElementwise::call_small`] takes (more: chunked).
const SMALL_INPUTS: usize = 16;

/// Runs `stages` on one chunk of `len` elements: `ins` holds the kernel's input pointers
/// (at the chunk) then `stage_ptrs`; stage `s` writes its chunk at `stage_ptrs[s]`, which
/// its finish then turns into what the later stages read.
///
/// # Safety
/// Every pointer addresses at least `len` elements of its operand's type (f32 for the
/// stages), and the stages were compiled for these operands (`stages::split`).
unsafe fn run_stages(
    stages: &[(CodePtr, Finish)],
    ins: &[*const u8],
    stage_ptrs: &[*mut u8],
    len: usize,
) {
    for ((code, finish), &out) in stages.iter().zip(stage_ptrs) {
        // SAFETY: the stage's code was generated for its kernel (`stages::split`): the
        // kernel's inputs, then one f32 input per earlier stage, one f32 output, no status;
        // each pointer addresses at least `len` elements of its type. The chunk is then
        // finished through the same pointer: `len` f32 values nothing else reads or writes
        // meanwhile.
        unsafe {
            let f: extern "C" fn(*const *const u8, *const *mut u8, u64) =
                std::mem::transmute(code.0);
            f(ins.as_ptr(), [out].as_ptr(), len as u64);
            finish.apply(std::slice::from_raw_parts_mut(out as *mut f32, len));
        }
    }
}

impl<'t> CompiledKernel<'t> {
    /// The kernel's spec.
    pub fn spec(&self) -> &KernelSpec {
        self.spec
    }

    /// How many stages run before the last one on each chunk: an element-wise kernel is
    /// split where f16 values round and, on hosts with AVX-512 or AVX2 and FMA, at
    /// transcendental ops (`crate::stages`); 0 when it runs whole.
    pub fn stage_count(&self) -> usize {
        self.stages.len()
    }

    /// The code to call straight ([`PlainElementwise`]) when this is an element-wise kernel
    /// on f32 and integer operands, with no floating-point status or stochastic rounding;
    /// it computes what [`CompiledKernel::run_elementwise`] does.
    pub fn plain_elementwise(&self) -> Option<PlainElementwise<'t>> {
        let (true, KernelSpec::Elementwise(k), Code::Jit(code)) =
            (self.plain, self.spec, self.code)
        else {
            return None;
        };
        // SAFETY: the code was generated for this spec's signature without a status
        // output (`plain`: no status): inputs, outputs, element count.
        let code = unsafe {
            std::mem::transmute::<*const u8, extern "C" fn(*const *const u8, *const *mut u8, u64)>(
                code.0,
            )
        };
        Some(PlainElementwise {
            code,
            inputs: k.inputs.len(),
            outputs: k.outputs.len(),
            chunked: (!self.stages.is_empty() || k.repeats_any()).then_some((self.stages, k)),
            table: std::marker::PhantomData,
        })
    }

    /// Runs an element-wise kernel on `n` elements; every buffer must hold at least `n`
    /// elements of its type.
    pub fn run_elementwise(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        n: usize,
    ) -> Result<(), CodegenError> {
        self.run_elementwise_at(inputs, outputs, n, 0)
    }

    /// [`CompiledKernel::run_elementwise`] for one vertex among many: `salt` tells the
    /// vertices apart for stochastic rounding (the same salt rounds the same way). A
    /// guarded kernel that raises a floating-point exception returns
    /// [`CodegenError::FloatingPoint`] with the first element that raised it.
    pub fn run_elementwise_at(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        n: usize,
        salt: u64,
    ) -> Result<(), CodegenError> {
        let (KernelSpec::Elementwise(k), Code::Jit(code)) = (self.spec, self.code) else {
            return Err(CodegenError::Type(
                "run_elementwise on a kernel that is not element-wise".into(),
            ));
        };
        if inputs.len() != k.inputs.len() || outputs.len() != k.outputs.len() {
            return Err(CodegenError::Type(format!(
                "the kernel takes {} inputs and {} outputs, given {} and {}",
                k.inputs.len(),
                k.outputs.len(),
                inputs.len(),
                outputs.len()
            )));
        }
        for (i, (t, buf)) in k.inputs.iter().zip(inputs).enumerate() {
            let need = k.input_len(i, n) * t.size();
            if buf.len() < need {
                return Err(size_error("input", i, buf.len(), need));
            }
        }
        for (i, ((t, _), buf)) in k.outputs.iter().zip(outputs.iter()).enumerate() {
            if buf.len() < n * t.size() {
                return Err(size_error("output", i, buf.len(), n * t.size()));
            }
        }
        // SAFETY: the code was generated for this spec's signature (plus the status output
        // when `self.status`); every pointer passed addresses at least `len` elements of
        // the type the code reads or writes there.
        let call = |ins: &[*const u8], outs: &[*mut u8], len: usize| unsafe {
            let f: extern "C" fn(*const *const u8, *const *mut u8, u64) =
                std::mem::transmute(code.0);
            f(ins.as_ptr(), outs.as_ptr(), len as u64);
        };
        let has_f16 = k
            .inputs
            .iter()
            .chain(k.outputs.iter().map(|(t, _)| t))
            .any(|t| *t == DType::F16);
        // f16 operands run in cache-sized chunks, converting each chunk at the boundary;
        // so do repeated inputs, expanded a chunk at a time, and staged kernels.
        let chunked = has_f16 || !self.stages.is_empty() || k.repeats_any();
        let mut status = if self.status {
            vec![0u32; if chunked { CHUNK.min(n) } else { n }]
        } else {
            Vec::new()
        };
        if !chunked {
            // On the stack: this runs once per vertex, hundreds of thousands of times a run.
            let (mut on_stack, mut on_heap) = ([std::ptr::null(); 16], Vec::new());
            let ins =
                crate::slots::slots(&mut on_stack, &mut on_heap, inputs.len(), std::ptr::null);
            for (slot, b) in ins.iter_mut().zip(inputs) {
                *slot = b.as_ptr();
            }
            let mut outs: SmallVec<[*mut u8; 4]> =
                outputs.iter_mut().map(|b| b.as_mut_ptr()).collect();
            if self.status {
                outs.push(status.as_mut_ptr() as *mut u8);
            }
            call(ins, &outs, n);
            return first_exception(&status, 0);
        }
        // Each f16 or repeated operand's chunk is widened or expanded into its own slot of
        // one per-thread buffer (inputs' slots first, then outputs', then the stages'),
        // reused from one vertex to the next.
        let chunk = CHUNK.min(n);
        let slot_of = |types: &mut dyn Iterator<Item = DType>| -> SmallVec<[usize; 8]> {
            types.map(|t| usize::from(t == DType::F16)).collect()
        };
        let in_slots: SmallVec<[usize; 8]> = (k.inputs.iter().enumerate())
            .map(|(i, &t)| usize::from(t == DType::F16 || k.repeat(i) > 1))
            .collect();
        let out_f16 = slot_of(&mut k.outputs.iter().map(|(t, _)| *t));
        let slots = in_slots.iter().chain(&out_f16).sum::<usize>() + self.stages.len();
        let mut wide = WIDE.take();
        if wide.len() < slots * chunk {
            wide.resize(slots * chunk, 0.0);
        }
        let mut parts: SmallVec<[&mut [f32]; 8]> =
            wide[..slots * chunk].chunks_mut(chunk).collect();
        let (in_parts, rest) = parts.split_at_mut(in_slots.iter().sum());
        let (out_parts, stage_parts) = rest.split_at_mut(out_f16.iter().sum());
        let stage_ptrs: SmallVec<[*mut u8; 8]> = (stage_parts.iter_mut())
            .map(|p| p.as_mut_ptr() as *mut u8)
            .collect();
        let ran = (|| {
            let mut start = 0;
            while start < n {
                let len = CHUNK.min(n - start);
                let mut ins: SmallVec<[*const u8; 16]> = SmallVec::new();
                let mut j = 0;
                for (i, ((t, buf), &slot)) in k.inputs.iter().zip(inputs).zip(&in_slots).enumerate()
                {
                    if k.repeat(i) > 1 {
                        expand_repeated(buf, *t, k.repeat(i), start, &mut in_parts[j][..len]);
                        ins.push(in_parts[j].as_ptr() as *const u8);
                        j += 1;
                    } else if slot == 1 {
                        halves::widen_into(&buf[start * 2..], &mut in_parts[j][..len]);
                        ins.push(in_parts[j].as_ptr() as *const u8);
                        j += 1;
                    } else {
                        ins.push(buf[start * t.size()..].as_ptr());
                    }
                }
                // Each stage reads the inputs and the stages before it (its code reads no
                // pointer past those), and its finished chunk is the later stages' input.
                ins.extend(stage_ptrs.iter().map(|p| *p as *const u8));
                // SAFETY: each pointer addresses at least `len` elements of its type (the stage
                // chunks hold `chunk` ≥ `len` f32 values); the stages are this kernel's.
                unsafe { run_stages(self.stages, &ins, &stage_ptrs, len) };
                let mut outs: SmallVec<[*mut u8; 4]> = SmallVec::new();
                let mut j = 0;
                for (((t, _), buf), &f16) in k.outputs.iter().zip(outputs.iter_mut()).zip(&out_f16)
                {
                    if f16 == 1 {
                        outs.push(out_parts[j].as_mut_ptr() as *mut u8);
                        j += 1;
                    } else {
                        outs.push(buf[start * t.size()..].as_mut_ptr());
                    }
                }
                if self.status {
                    outs.push(status.as_mut_ptr() as *mut u8);
                }
                call(&ins, &outs, len);
                first_exception(&status[..status.len().min(len)], start)?;
                let mut j = 0;
                for (o, (buf, &f16)) in outputs.iter_mut().zip(&out_f16).enumerate() {
                    if f16 == 0 {
                        continue;
                    }
                    let dst = &mut buf[start * 2..(start + len) * 2];
                    let wide = &out_parts[j][..len];
                    j += 1;
                    match self.esr {
                        None => narrow(wide, dst),
                        Some(seed) => {
                            let salt = salt ^ ((o as u64) << 56);
                            crate::fp::narrow_stochastic(wide, dst, seed, salt, start);
                        }
                    }
                }
                start += len;
            }
            Ok(())
        })();
        drop(parts);
        WIDE.set(wide);
        ran
    }

    /// The reduction's code to call straight ([`PlainReduce`]), when its input is not f16
    /// (which [`CompiledKernel::run_reduce`] widens first).
    pub fn plain_reduce(&self) -> Option<PlainReduce<'t>> {
        let (KernelSpec::Reduce(k), Code::Jit(code)) = (self.spec, self.code) else {
            return None;
        };
        if k.input == DType::F16 {
            return None;
        }
        // SAFETY: a reduction's code is generated with this signature: input, output, run
        // length, runs.
        let code = unsafe {
            std::mem::transmute::<*const u8, extern "C" fn(*const u8, *mut u8, u64, u64)>(code.0)
        };
        Some(PlainReduce {
            code,
            table: std::marker::PhantomData,
        })
    }

    /// Runs a reduction: `runs` runs of `run_length` input elements, one partial each.
    pub fn run_reduce(
        &self,
        input: &[u8],
        output: &mut [u8],
        run_length: usize,
        runs: usize,
    ) -> Result<(), CodegenError> {
        let (KernelSpec::Reduce(k), Code::Jit(code)) = (self.spec, self.code) else {
            return Err(CodegenError::Type(
                "run_reduce on a kernel that is not a reduction".into(),
            ));
        };
        let need_in = run_length * runs * k.input.size();
        let need_out = runs * k.partial_type().size();
        if input.len() < need_in {
            return Err(size_error("input", 0, input.len(), need_in));
        }
        if output.len() < need_out {
            return Err(size_error("output", 0, output.len(), need_out));
        }
        let n = run_length * runs;
        // f16 input is widened into the thread's buffer, reused from one vertex to the next.
        let mut wide = match k.input {
            DType::F16 => WIDE.take(),
            _ => Vec::new(),
        };
        let src = match k.input {
            DType::F16 => {
                if wide.len() < n {
                    wide.resize(n, 0.0);
                }
                halves::widen_into(input, &mut wide[..n]);
                wide.as_ptr() as *const u8
            }
            _ => input.as_ptr(),
        };
        // SAFETY: sizes checked above (f16 input widened to f32); the code reads
        // run_length × runs input elements and writes `runs` partials.
        unsafe {
            let f: extern "C" fn(*const u8, *mut u8, u64, u64) = std::mem::transmute(code.0);
            f(src, output.as_mut_ptr(), run_length as u64, runs as u64);
        }
        if k.input == DType::F16 {
            WIDE.set(wide);
        }
        Ok(())
    }
}

impl CompiledKernel<'_> {
    /// Runs a matrix-product partial: `c` (m×n, of the kernel's partials type) = `a` (m×k)
    /// · `b` (k×n), row-major. f16 partials are the f32 products rounded to f16 (to
    /// nearest even) as they are stored.
    pub fn run_matmul(&self, a: &[u8], b: &[u8], c: &mut [u8]) -> Result<(), CodegenError> {
        let KernelSpec::MatMul(k) = self.spec else {
            return Err(CodegenError::Type(
                "run_matmul on a kernel that is not a matrix product".into(),
            ));
        };
        if k.partials != DType::F16 {
            return self.run_matmul_f32(k, a, b, c);
        }
        let cells = k.m * k.n;
        if c.len() < cells * 2 {
            return Err(size_error("output", 0, c.len(), cells * 2));
        }
        let mut wide = vec![0f32; cells];
        if cfg!(target_endian = "little") {
            self.run_matmul_f32(k, a, b, f32_bytes_mut(&mut wide))?;
        } else {
            let mut bytes = vec![0u8; cells * 4];
            self.run_matmul_f32(k, a, b, &mut bytes)?;
            for (w, ch) in wide.iter_mut().zip(bytes.chunks_exact(4)) {
                *w = f32::from_le_bytes([ch[0], ch[1], ch[2], ch[3]]);
            }
        }
        narrow(&wide, &mut c[..cells * 2]);
        Ok(())
    }

    /// [`CompiledKernel::run_matmul`] into f32 partials.
    fn run_matmul_f32(
        &self,
        k: &crate::kernel::MatMulKernel,
        a: &[u8],
        b: &[u8],
        c: &mut [u8],
    ) -> Result<(), CodegenError> {
        let (m, kk, n) = (k.m, k.k, k.n);
        let size = k.input.size();
        if a.len() < m * kk * size {
            return Err(size_error("input", 0, a.len(), m * kk * size));
        }
        if b.len() < kk * n * size {
            return Err(size_error("input", 1, b.len(), kk * n * size));
        }
        if c.len() < m * n * 4 {
            return Err(size_error("output", 0, c.len(), m * n * 4));
        }
        let to_f32 = |bytes: &[u8], count: usize, out: &mut Vec<f32>| {
            out.resize(count, 0.0);
            match k.input {
                DType::F16 => halves::widen_into(bytes, out),
                _ => {
                    for (o, ch) in out.iter_mut().zip(bytes[..count * 4].chunks_exact(4)) {
                        *o = f32::from_le_bytes([ch[0], ch[1], ch[2], ch[3]]);
                    }
                }
            }
        };
        if let (Code::NativeMatMul, Some((a, b, c))) =
            (self.code, f32_views(k.input, a, b, c, m, kk, n))
        {
            gemm_f32(m, kk, n, a, b, c);
            return Ok(());
        }
        // A nested call on this thread (none today) would find the buffers taken and
        // allocate its own.
        let [mut wa, mut wb] = OPERANDS.take();
        to_f32(a, m * kk, &mut wa);
        to_f32(b, kk * n, &mut wb);
        let ran = self.run_matmul_converted(k, &wa, &wb, c);
        OPERANDS.set([wa, wb]);
        ran
    }

    /// [`CompiledKernel::run_matmul_f32`] on operands already converted to f32.
    fn run_matmul_converted(
        &self,
        k: &crate::kernel::MatMulKernel,
        a: &[f32],
        b: &[f32],
        c: &mut [u8],
    ) -> Result<(), CodegenError> {
        let (m, kk, n) = (k.m, k.k, k.n);
        if let Code::NativeMatMul = self.code {
            return self.run_matmul_refs(MatRef::row_major(a, kk), MatRef::row_major(b, n), c);
        }
        let mut out = vec![0f32; m * n];
        match self.code {
            Code::JitMatMul(code) => {
                // SAFETY: the code was generated for exactly these m, k, n and reads a (m×k),
                // b (k×n) and writes out (m×n), all f32 and of those lengths.
                unsafe {
                    let f: extern "C" fn(*const f32, *const f32, *mut f32) =
                        std::mem::transmute(code.0);
                    f(a.as_ptr(), b.as_ptr(), out.as_mut_ptr());
                }
            }
            _ => gemm_f32(m, kk, n, a, b, &mut out),
        }
        for (chunk, v) in c[..m * n * 4].chunks_exact_mut(4).zip(&out) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }
}

/// `c = a × b` for row-major f32 matrices a (m×k), b (k×n), c (m×n), with the `gemm`
/// crate's f32 kernels (what matrix-product vertices and convolution codelets run).
pub fn gemm_f32(m: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    gemm_f32_refs(m, k, n, MatRef::row_major(a, k), MatRef::row_major(b, n), c);
}

/// An f32 matrix seen in place with any strides: element `(r, c)` is
/// `data[at + r * rs + c * cs]` (strides may be zero or negative).
#[derive(Debug, Clone, Copy)]
pub struct MatRef<'a> {
    /// The elements the matrix is read from.
    pub data: &'a [f32],
    /// Index of element (0, 0).
    pub at: usize,
    /// Step between rows.
    pub rs: isize,
    /// Step between columns.
    pub cs: isize,
}

impl<'a> MatRef<'a> {
    /// A row-major matrix of `cols` columns from the start of `data`.
    pub fn row_major(data: &'a [f32], cols: usize) -> MatRef<'a> {
        MatRef {
            data,
            at: 0,
            rs: cols as isize,
            cs: 1,
        }
    }

    /// True when every element of a `rows × cols` matrix lies in `data`.
    pub(crate) fn fits(&self, rows: usize, cols: usize) -> bool {
        if rows == 0 || cols == 0 {
            return true;
        }
        let (r, c) = ((rows - 1) as isize, (cols - 1) as isize);
        let lo = self.at as isize + (r * self.rs).min(0) + (c * self.cs).min(0);
        let hi = self.at as isize + (r * self.rs).max(0) + (c * self.cs).max(0);
        lo >= 0 && (hi as usize) < self.data.len()
    }
}

impl CompiledKernel<'_> {
    /// Runs an f32 matrix-product partial on operands seen in place with any strides (see
    /// [`MatRef`]): `c` (m×n f32, row-major bytes) = `a` (m×k) · `b` (k×n).
    pub fn run_matmul_refs(&self, a: MatRef, b: MatRef, c: &mut [u8]) -> Result<(), CodegenError> {
        let KernelSpec::MatMul(k) = self.spec else {
            return Err(CodegenError::Type(
                "run_matmul_refs on a kernel that is not a matrix product".into(),
            ));
        };
        let (m, kk, n) = (k.m, k.k, k.n);
        if !a.fits(m, kk) || !b.fits(kk, n) {
            return Err(CodegenError::Type(format!(
                "matrix operands do not hold a {m}x{kk} by {kk}x{n} product"
            )));
        }
        if c.len() < m * n * 4 {
            return Err(size_error("output", 0, c.len(), m * n * 4));
        }
        // SAFETY: every bit pattern is a valid f32; align_to only yields the aligned middle.
        match unsafe { c[..m * n * 4].align_to_mut::<f32>() } {
            ([], out, []) if cfg!(target_endian = "little") => gemm_f32_refs(m, kk, n, a, b, out),
            _ => {
                let mut out = vec![0f32; m * n];
                gemm_f32_refs(m, kk, n, a, b, &mut out);
                for (chunk, v) in c[..m * n * 4].chunks_exact_mut(4).zip(&out) {
                    chunk.copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        Ok(())
    }
}

/// `c = a × b` for f32 matrices a (m×k) and b (k×n) with any strides, c (m×n) row-major.
pub fn gemm_f32_refs(m: usize, k: usize, n: usize, a: MatRef, b: MatRef, c: &mut [f32]) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    assert!(
        a.fits(m, k) && b.fits(k, n) && c.len() >= m * n,
        "matrix operands shorter than their shapes"
    );
    if !crate::narrow_product::narrow_product(m, k, n, &a, &b, c) {
        gemm_unchecked(m, k, n, &a, &b, c);
    }
    // XLA starts every sum of products at +0, so a sum is never -0 (+0 + -0 is +0); the
    // kernels above start at the first product, which keeps a -0 when every product is -0
    // (padding times a negative weight). Adding +0 turns exactly those into +0.
    for x in &mut c[..m * n] {
        *x += 0.0;
    }
}

/// `gemm_f32_refs` past its checks: the `gemm` crate's kernel into row-major `c`.
fn gemm_unchecked(m: usize, k: usize, n: usize, a: &MatRef, b: &MatRef, c: &mut [f32]) {
    // SAFETY: every element of a (m×k) and b (k×n) lies in its slice (asserted by `fits`)
    // and c is row-major m×n and at least that long; c does not alias a or b (&mut).
    unsafe { gemm_into(m, k, n, a, b, c.as_mut_ptr(), (n as isize, 1)) }
}

/// `dst` = `a` (m × k) × `b` (k × n) by the `gemm` crate's kernel (one thread), element
/// `(i, j)` of `dst` at `i * dst_steps.0 + j * dst_steps.1`.
///
/// # Safety
/// Every element of `a` and `b` lies in its slice, `dst` addresses every element its steps
/// reach, writable, and overlaps neither operand.
pub(crate) unsafe fn gemm_into(
    m: usize,
    k: usize,
    n: usize,
    a: &MatRef,
    b: &MatRef,
    dst: *mut f32,
    (dst_rs, dst_cs): (isize, isize),
) {
    // SAFETY: as the caller promises.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            dst_cs,
            dst_rs,
            false,
            a.data.as_ptr().add(a.at),
            a.cs,
            a.rs,
            b.data.as_ptr().add(b.at),
            b.cs,
            b.rs,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// The operands and result of an f32 product seen in place as f32 slices, when the bytes
/// are 4-aligned and the host is little-endian (the device byte order): no copies.
fn f32_views<'a>(
    input: DType,
    a: &'a [u8],
    b: &'a [u8],
    c: &'a mut [u8],
    m: usize,
    k: usize,
    n: usize,
) -> Option<(&'a [f32], &'a [f32], &'a mut [f32])> {
    if input != DType::F32 || cfg!(target_endian = "big") {
        return None;
    }
    // SAFETY: every bit pattern is a valid f32; align_to only yields the aligned middle.
    let (pa, a, _) = unsafe { a[..m * k * 4].align_to::<f32>() };
    let (pb, b, _) = unsafe { b[..k * n * 4].align_to::<f32>() };
    let (pc, c, _) = unsafe { c[..m * n * 4].align_to_mut::<f32>() };
    (pa.is_empty() && pb.is_empty() && pc.is_empty()).then_some((a, b, c))
}

/// The result type of an expression over these inputs (re-exported for kernel builders).
pub fn result_type(expr: &Expr, inputs: &[DType]) -> Result<DType, CodegenError> {
    expr_type(expr, inputs)
}
