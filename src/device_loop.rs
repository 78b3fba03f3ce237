//! Steps per execution from the host's side: which parameters a loop feeds, how its outputs
//! come back, and the same loop on the reference evaluator. The device side is
//! [`compiler::DeviceLoop`]; the semantics are those of `conformance-loops`: a parameter
//! that `input_output_alias` names is carried from one iteration to the next, a parameter
//! given with one extra leading dimension of the iteration count is fed one slice per
//! iteration, any other is constant; an aliased output is its value after the last
//! iteration, every other output is stacked over the iterations (or the last kept).

use anyhow::{anyhow, bail};
use compiler::{DeviceLoop, ParameterRole};
use xla_ir::eval::Feeds;
use xla_ir::literal::ArrayLiteral;
use xla_ir::{Literal, Module};

/// What the host keeps of an output produced every iteration (the seed's
/// `IPUOutfeedMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutfeedMode {
    /// Every iteration's value, stacked `[iterations, *shape]`.
    #[default]
    All,
    /// Only the last iteration's value (every iteration still streams it out).
    Last,
}

/// The device loop running `module` `iterations` times on `inputs` (one literal per entry
/// parameter): a parameter whose input has one more leading dimension, of size
/// `iterations`, than the parameter is fed; one with the parameter's own shape is constant
/// or, if aliased, carried. Any other shape is an error naming the parameter.
pub fn device_loop_for(
    module: &Module,
    iterations: u64,
    inputs: &[Literal],
) -> anyhow::Result<DeviceLoop> {
    if iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    let entry = module.entry_computation();
    let params = entry.parameters();
    if inputs.len() != params.len() {
        bail!(
            "the entry computation takes {} parameters, {} inputs were given",
            params.len(),
            inputs.len()
        );
    }
    let mut fed = Vec::with_capacity(params.len());
    for (k, (&p, input)) in params.iter().zip(inputs).enumerate() {
        let param = entry.instr(p);
        let (Some(want), Literal::Array(got)) = (param.shape.as_array(), input) else {
            bail!(
                "parameter {k} ({}) is {}; a device loop feeds array parameters only",
                param.name,
                param.shape
            );
        };
        let dims = &got.shape.dims;
        let same = got.shape.element_type == want.element_type && *dims == want.dims;
        let per_iteration = got.shape.element_type == want.element_type
            && dims.len() == want.dims.len() + 1
            && dims[0] as u64 == iterations
            && dims[1..] == want.dims[..];
        if !same && !per_iteration {
            bail!(
                "parameter {k} ({}) is {want}: its input must be {want} (the same every iteration) or have one more leading dimension of {iterations} (one per iteration), but it is {}",
                param.name,
                got.shape
            );
        }
        fed.push(per_iteration && !same);
    }
    let lp = DeviceLoop {
        iterations,
        fed,
        resident: false,
    };
    lp.roles(module)?;
    Ok(lp)
}

/// Runs the loop on the reference evaluator: the oracle for the device loop, and the
/// reference engine's `--iterations`. Returns the result leaves as the loop's outputs;
/// `feeds` serve the module's infeeds and outfeeds across all iterations.
pub fn evaluate_loop(
    module: &Module,
    lp: &DeviceLoop,
    inputs: &[Literal],
    mode: OutfeedMode,
    feeds: &mut Feeds,
) -> anyhow::Result<Vec<ArrayLiteral>> {
    let roles = lp.roles(module)?;
    let mut args: Vec<Literal> = inputs.to_vec();
    let mut kept: Vec<Vec<ArrayLiteral>> = Vec::new();
    let mut last: Vec<ArrayLiteral> = Vec::new();
    for i in 0..lp.iterations {
        for (k, role) in roles.iter().enumerate() {
            if let (ParameterRole::Fed, Literal::Array(all)) = (role, &inputs[k]) {
                args[k] = Literal::Array(all.index_leading(i as usize));
            }
        }
        let out = leaves(
            xla_ir::eval::evaluate_with_feeds(module, &args, feeds)
                .map_err(|e| anyhow!("iteration {i} of {}: {e}", lp.iterations))?,
        );
        for (k, role) in roles.iter().enumerate() {
            if let ParameterRole::Carried { output } = role {
                args[k] = Literal::Array(out[*output].clone());
            }
        }
        kept.resize_with(out.len(), Vec::new);
        for (j, value) in out.iter().enumerate() {
            match mode {
                OutfeedMode::All => kept[j].push(value.clone()),
                OutfeedMode::Last => kept[j] = vec![value.clone()],
            }
        }
        last = out;
    }
    let carried: Vec<usize> = roles
        .iter()
        .filter_map(|r| match r {
            ParameterRole::Carried { output } => Some(*output),
            _ => None,
        })
        .collect();
    last.into_iter()
        .enumerate()
        .map(|(j, final_value)| {
            if carried.contains(&j) || mode == OutfeedMode::Last {
                Ok(final_value)
            } else {
                ArrayLiteral::stack(&kept[j]).map_err(|e| anyhow!("output {j}: {e}"))
            }
        })
        .collect()
}

/// The leaves of a (possibly nested) result tuple, in order.
pub fn leaves(result: Literal) -> Vec<ArrayLiteral> {
    match result {
        Literal::Array(a) => vec![a],
        Literal::Tuple(elems) => elems.into_iter().flat_map(leaves).collect(),
        Literal::Token => vec![],
    }
}
