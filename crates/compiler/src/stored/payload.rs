//! A [`Compiled`] as bytes and back: the executable and its host streams with serde
//! (postcard: compact and fast) but for the compute sets and rearrangements, packed by hand
//! after it ([`packed`]); HLO shapes as their text; every native codelet as the source it
//! was built from, so reading builds the same codelets again (the convolution parts that
//! shared a patch matrix share one again).

use super::{StoreError, packed};
use crate::lower::codelet::{CodeletSource, EvalCodelet, codelet_of};
use crate::lower::conv_codelet::{ConvCodelet, ConvPlans, SharedPatches};
use crate::{Compiled, Feed, HostBuffer, PipelineLayout};
use codegen::{FloatMode, KernelSpec};
use runtime::cost::VertexCost;
use runtime::{
    CodeletRef, Collective, Executable, LivePoint, Program, Replication, Stream, Target, Tensor,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use xla_ir::{ArrayShape, Shape};

/// The stored form, but for the packed compute sets and rearrangements that follow it
/// ([`packed`]); `X` is borrowed when writing, owned when reading.
#[derive(Serialize, Deserialize)]
struct Payload<X> {
    executable: X,
    kernels: Vec<KernelSpec>,
    codelets: Vec<StoredCodelet>,
    inputs: Vec<StoredBuffer>,
    outputs: Vec<StoredBuffer>,
    infeeds: Vec<StoredFeed>,
    outfeeds: Vec<StoredFeed>,
    warnings: Vec<String>,
    pipeline: Option<PipelineLayout>,
}

/// The executable's fields but its compute sets, rearrangements and codelets, borrowed.
#[derive(Serialize)]
struct ExecutableOut<'a> {
    target: &'a Target,
    num_ipus: usize,
    tensors: &'a [Tensor],
    streams: &'a [Stream],
    functions: &'a [Program],
    collectives: &'a [Collective],
    replication: &'a Replication,
    floating_point: &'a FloatMode,
    liveness: &'a [LivePoint],
    program: &'a Program,
}

/// [`ExecutableOut`] read back (serde writes a slice and a vector alike).
#[derive(Deserialize)]
struct ExecutableIn {
    target: Target,
    num_ipus: usize,
    tensors: Vec<Tensor>,
    streams: Vec<Stream>,
    functions: Vec<Program>,
    collectives: Vec<Collective>,
    replication: Replication,
    floating_point: FloatMode,
    liveness: Vec<LivePoint>,
    program: Program,
}

/// A codelet's source: its module as HLO text, its inputs' shapes as text.
#[derive(Serialize, Deserialize)]
struct StoredCodelet {
    name: String,
    module: String,
    inputs: Vec<String>,
    /// Supervisor cycles (true) or worker instructions.
    supervisor: bool,
    cost: u64,
    /// Codelets with the same group share one patch matrix.
    shared: Option<u32>,
    /// A convolution with f16 partials.
    half_partials: bool,
}

#[derive(Serialize, Deserialize)]
struct StoredBuffer {
    stream: String,
    shape: String,
    per_iteration: bool,
}

#[derive(Serialize, Deserialize)]
struct StoredFeed {
    name: String,
    leaves: Vec<StoredBuffer>,
    shape: String,
}

/// `compiled` as bytes.
pub(super) fn encode(compiled: &Compiled) -> Result<Vec<u8>, StoreError> {
    let e = &compiled.executable;
    let (compute_sets, kernels) = packed::pack_compute_sets(&e.compute_sets);
    let payload = Payload {
        executable: ExecutableOut {
            target: &e.target,
            num_ipus: e.num_ipus,
            tensors: &e.tensors,
            streams: &e.streams,
            functions: &e.functions,
            collectives: &e.collectives,
            replication: &e.replication,
            floating_point: &e.floating_point,
            liveness: &e.liveness,
            program: &e.program,
        },
        kernels,
        codelets: store_codelets(&e.codelets)?,
        inputs: compiled.inputs.iter().map(store_buffer).collect(),
        outputs: compiled.outputs.iter().map(store_buffer).collect(),
        infeeds: compiled.infeeds.iter().map(store_feed).collect(),
        outfeeds: compiled.outfeeds.iter().map(store_feed).collect(),
        warnings: compiled.warnings.clone(),
        pipeline: compiled.pipeline.clone(),
    };
    let mut bytes =
        postcard::to_stdvec(&payload).map_err(|e| StoreError::Undecodable(e.to_string()))?;
    // The compute sets' length first, so the two packed parts decode side by side.
    bytes.extend_from_slice(&(compute_sets.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&compute_sets);
    bytes.extend_from_slice(&packed::pack_rearranges(&e.rearranges));
    Ok(bytes)
}

/// The [`Compiled`] `bytes` hold.
pub(super) fn decode(bytes: &[u8]) -> Result<Compiled, StoreError> {
    let (payload, rest): (Payload<ExecutableIn>, &[u8]) =
        postcard::take_from_bytes(bytes).map_err(|e| StoreError::Undecodable(e.to_string()))?;
    let (compute_sets, rearranges) = split_packed(rest)?;
    // Mostly allocation (tens of megabytes in a fresh process): the two parts side by side
    // take about half the time.
    let (compute_sets, rearranges) = std::thread::scope(|s| {
        let sets = s.spawn(|| {
            let mut r = packed::Reader::new(compute_sets, "packed compute sets");
            let sets = packed::unpack_compute_sets(&mut r, &payload.kernels)?;
            r.finish().map(|()| sets)
        });
        let mut r = packed::Reader::new(rearranges, "packed rearrangements");
        let rearranges = packed::unpack_rearranges(&mut r).and_then(|x| r.finish().map(|()| x));
        let sets = sets
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (sets, rearranges)
    });
    let (compute_sets, rearranges) = (compute_sets?, rearranges?);
    let e = payload.executable;
    let executable = Executable {
        target: e.target,
        num_ipus: e.num_ipus,
        tensors: e.tensors,
        streams: e.streams,
        compute_sets,
        functions: e.functions,
        rearranges,
        codelets: build_codelets(payload.codelets)?,
        collectives: e.collectives,
        replication: e.replication,
        floating_point: e.floating_point,
        liveness: e.liveness,
        program: e.program,
    };
    Ok(Compiled {
        executable,
        inputs: payload
            .inputs
            .into_iter()
            .map(read_buffer)
            .collect::<Result<_, _>>()?,
        outputs: payload
            .outputs
            .into_iter()
            .map(read_buffer)
            .collect::<Result<_, _>>()?,
        infeeds: payload
            .infeeds
            .into_iter()
            .map(read_feed)
            .collect::<Result<_, _>>()?,
        outfeeds: payload
            .outfeeds
            .into_iter()
            .map(read_feed)
            .collect::<Result<_, _>>()?,
        warnings: payload.warnings,
        pipeline: payload.pipeline,
    })
}

/// The packed compute sets and the packed rearrangements after them.
fn split_packed(bytes: &[u8]) -> Result<(&[u8], &[u8]), StoreError> {
    let short = || StoreError::Undecodable("the packed parts are cut short".into());
    let (len, rest) = bytes.split_first_chunk::<8>().ok_or_else(short)?;
    let len = usize::try_from(u64::from_le_bytes(*len)).map_err(|_| short())?;
    if len > rest.len() {
        return Err(short());
    }
    Ok(rest.split_at(len))
}

fn store_codelets(codelets: &[CodeletRef]) -> Result<Vec<StoredCodelet>, StoreError> {
    // Shared patch matrices, by identity: the group of each.
    let mut groups: Vec<&Arc<SharedPatches>> = Vec::new();
    codelets
        .iter()
        .map(|c| {
            let any = c.0.as_any();
            let (source, shared) =
                if let Some(e) = any.and_then(|a| a.downcast_ref::<EvalCodelet>()) {
                    (e.source(), None)
                } else if let Some((source, shared)) = any
                    .and_then(|a| a.downcast_ref::<ConvCodelet>())
                    .and_then(ConvCodelet::source)
                {
                    (source, shared)
                } else {
                    return Err(StoreError::Unstorable(c.0.name().to_string()));
                };
            let shared = shared.map(|s| match groups.iter().position(|g| Arc::ptr_eq(g, s)) {
                Some(k) => k as u32,
                None => {
                    groups.push(s);
                    groups.len() as u32 - 1
                }
            });
            let (supervisor, cost) = match source.cost {
                VertexCost::Supervisor(c) => (true, c),
                VertexCost::Worker(c) => (false, c),
            };
            Ok(StoredCodelet {
                name: source.name.clone(),
                module: source.module.to_string(),
                inputs: source.inputs.iter().map(ToString::to_string).collect(),
                supervisor,
                cost,
                shared,
                half_partials: source.half_partials,
            })
        })
        .collect()
}

fn build_codelets(stored: Vec<StoredCodelet>) -> Result<Vec<CodeletRef>, StoreError> {
    let mut groups: Vec<Arc<SharedPatches>> = Vec::new();
    let mut plans = ConvPlans::default();
    stored
        .into_iter()
        .map(|c| {
            let module = xla_ir::parse_module(&c.module).map_err(|e| {
                StoreError::Undecodable(format!("codelet {}: its module: {e}", c.name))
            })?;
            let inputs = c
                .inputs
                .iter()
                .map(|s| array_shape(s))
                .collect::<Result<_, _>>()?;
            let shared = c.shared.map(|k| {
                let k = k as usize;
                while groups.len() <= k {
                    groups.push(Arc::new(SharedPatches::default()));
                }
                &groups[k]
            });
            let what = c.name.clone();
            let source = CodeletSource {
                name: c.name,
                module,
                inputs,
                cost: if c.supervisor {
                    VertexCost::Supervisor(c.cost)
                } else {
                    VertexCost::Worker(c.cost)
                },
                half_partials: c.half_partials,
            };
            codelet_of(source, shared, &mut plans)
                .map_err(|e| StoreError::Undecodable(format!("codelet {what}: {e}")))
        })
        .collect()
}

fn store_buffer(b: &HostBuffer) -> StoredBuffer {
    StoredBuffer {
        stream: b.stream.clone(),
        shape: b.shape.to_string(),
        per_iteration: b.per_iteration,
    }
}

fn read_buffer(b: StoredBuffer) -> Result<HostBuffer, StoreError> {
    Ok(HostBuffer {
        shape: array_shape(&b.shape)?,
        stream: b.stream,
        per_iteration: b.per_iteration,
    })
}

fn store_feed(f: &Feed) -> StoredFeed {
    StoredFeed {
        name: f.name.clone(),
        leaves: f.leaves.iter().map(store_buffer).collect(),
        shape: f.shape.to_string(),
    }
}

fn read_feed(f: StoredFeed) -> Result<Feed, StoreError> {
    Ok(Feed {
        shape: shape(&f.shape)?,
        name: f.name,
        leaves: f
            .leaves
            .into_iter()
            .map(read_buffer)
            .collect::<Result<_, _>>()?,
    })
}

fn shape(text: &str) -> Result<Shape, StoreError> {
    xla_ir::parse_shape(text)
        .map_err(|e| StoreError::Undecodable(format!("the shape '{text}': {e}")))
}

fn array_shape(text: &str) -> Result<ArrayShape, StoreError> {
    match shape(text)? {
        Shape::Array(a) => Ok(a),
        _ => Err(StoreError::Undecodable(format!(
            "the shape '{text}' is not an array's"
        ))),
    }
}
