//! Host shortcuts: work the device does that the host can skip or do in bulk while
//! producing the same bytes. Each is one module; [`HostPlan`] holds what they decided for
//! one executable, and [`EngineOptions::shortcuts`] turns them all off, so tests can compare
//! the plain path with them bit for bit. None changes a cycle: costs are the model's.
//!
//! - `operand_views`: matrix-product operand blocks read in place from a rearrangement's
//!   gathered window instead of being written to every tile;
//! - `product_batches`: matrix-product vertices sharing an operand run as one large gemm;
//! - `kept_results`: batched products' results left in the batch scratch, read from there;
//! - `scratch_reads`: K-part sums read their parts straight from the batch scratch, the
//!   rearrangement between them skipped on the host;
//! - `forwarded_copies`: copies into an argument only kept windows read, deferred, the
//!   windows gathered through them from the copy's source;
//! - `codelet_groups`: codelet vertices that share work (a convolution's parts sharing
//!   their patches) run together.
//!
//! A new step kind starts on the plain path (its own loaded form in `exec/`) and may gain a
//! shortcut later as a module here, planned in [`HostPlan::plan`].
//!
//! [`EngineOptions::shortcuts`]: crate::EngineOptions::shortcuts

pub(crate) mod codelet_groups;
pub(crate) mod forwarded_copies;
pub(crate) mod kept_results;
pub(crate) mod operand_views;
pub(crate) mod product_batches;
pub(crate) mod scratch_reads;

use crate::error::RuntimeError;
use crate::exec::compute::LoadedComputeSet;
use crate::model::steps::ComputeCost;
use crate::program::executable::{Executable, TensorId};
use codegen::KernelId;
use forwarded_copies::ForwardedCopies;
use kept_results::KeptResult;
use operand_views::{OperandViews, SharedPiece};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use scratch_reads::ScratchReads;

/// What the shortcuts decided for one executable.
#[derive(Debug, Default)]
pub(crate) struct HostPlan {
    /// By rearrangement: its windows are kept and its destination is never written.
    pub kept_windows: Vec<bool>,
    /// By rearrangement: pieces of its kept windows gathered into buffers of their own.
    pub shared_pieces: Vec<Vec<SharedPiece>>,
    /// Matrix-product results left in a compute set's batch scratch.
    pub results: FxHashMap<TensorId, KeptResult>,
    /// Rearrangements skipped because their readers read the batch scratch.
    pub scratch_reads: ScratchReads,
    /// Copies deferred until a kept window reads their destination.
    pub forwarded: ForwardedCopies,
}

impl HostPlan {
    /// The operand views of `exe` (validated), with `shortcuts`: planned first, beside the
    /// kernels, as the compute sets load with them.
    pub(crate) fn views(exe: &Executable, shortcuts: bool) -> OperandViews {
        match shortcuts {
            true => OperandViews::plan(exe),
            false => OperandViews::none(exe),
        }
    }

    /// Loads every compute set of `exe` (kernels compiled as `kernels`, tiles weighed by
    /// the compute sets' `costs`), reading operands through `views` ([`HostPlan::views`]).
    pub(crate) fn load_compute_sets(
        exe: &Executable,
        views: &OperandViews,
        costs: &[ComputeCost],
        kernels: &[Vec<KernelId>],
    ) -> Result<Vec<LoadedComputeSet>, RuntimeError> {
        kernels
            .par_iter()
            .enumerate()
            .map(|(cs, ids)| LoadedComputeSet::load(exe, cs, views, ids, &costs[cs]))
            .collect()
    }

    /// With `shortcuts`, plans every other shortcut into the loaded `compute_sets`
    /// ([`HostPlan::load_compute_sets`] with `views`).
    pub(crate) fn plan(
        exe: &Executable,
        views: OperandViews,
        mut compute_sets: Vec<LoadedComputeSet>,
        shortcuts: bool,
        pool: &rayon::ThreadPool,
    ) -> (Vec<LoadedComputeSet>, HostPlan) {
        if !shortcuts {
            let plan = HostPlan {
                kept_windows: views.kept,
                shared_pieces: views.shared,
                results: FxHashMap::default(),
                scratch_reads: ScratchReads::none(exe),
                forwarded: ForwardedCopies::none(exe),
            };
            return (compute_sets, plan);
        }
        let results = kept_results::plan(exe, &mut compute_sets, &views.kept);
        let scratch_reads =
            scratch_reads::plan(exe, &mut compute_sets, &views.kept, &results, pool);
        let forwarded = forwarded_copies::plan(exe, &views.kept, &results, &scratch_reads, pool);
        for cs in &mut compute_sets {
            cs.group_codelets(&exe.codelets);
        }
        let plan = HostPlan {
            kept_windows: views.kept,
            shared_pieces: views.shared,
            results,
            scratch_reads,
            forwarded,
        };
        (compute_sets, plan)
    }
}
