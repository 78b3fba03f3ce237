//! Every `IpuConfig` option with its type, default and what it does (the seed's
//! IPUConfig metadata, for `ipuxla config`): one row per key of the config's JSON form, in
//! the order the JSON has them. A test checks the table and the config's keys agree.

use crate::IpuConfig;
use serde_json::Value;

/// One option: its dotted key, type and description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionDoc {
    /// The key, dotted (`ipu_model.tiles_per_ipu`).
    pub key: &'static str,
    /// Its type as the seed names it.
    pub kind: &'static str,
    /// What it does in ipuxla (the seed's description, with what ipuxla does about it).
    pub description: &'static str,
}

/// Every option.
pub const OPTIONS: &[OptionDoc] = &[
    OptionDoc {
        key: "ipu_model.version",
        kind: "str",
        description: "The simulated IPU version, \"ipu1\" or \"ipu2\".",
    },
    OptionDoc {
        key: "ipu_model.tiles_per_ipu",
        kind: "int",
        description: "Tiles per simulated IPU; 0 is the version's standard count (1216 or 1472).",
    },
    OptionDoc {
        key: "ipu_model.compile_ipu_code",
        kind: "bool",
        description: "Also compile real IPU code when simulating: tile memory then holds the kernels' code, vertex state and control code beside the tensors (and a tile can run out of memory for them). False counts tensors only.",
    },
    OptionDoc {
        key: "ipu_model.streaming_memory",
        kind: "bool",
        description: "ipuxla's own: a module too big for tile memory runs out of core, paged through Streaming Memory (ipu2); false fails with the out-of-memory report instead.",
    },
    OptionDoc {
        key: "auto_select_ipus",
        kind: "int or list[int]",
        description: "IPUs the program runs on: an int, or a list with one entry per device (the seed's /device:IPU:0, /device:IPU:1, ...), each its IPU count. A module runs on one device: with several, `--device K` (IpuConfig::for_device) chooses it.",
    },
    OptionDoc {
        key: "matmuls.poplar_options",
        kind: "dict",
        description: "Matrix-product planner options: availableMemoryProportion (proportion of tile memory a plan may use for temporaries, default \"0.6\"), partialsType (\"float\" or \"half\").",
    },
    OptionDoc {
        key: "convolutions.poplar_options",
        kind: "dict",
        description: "Convolution planner options: availableMemoryProportion (default \"0.6\"), partialsType (\"float\" or \"half\").",
    },
    OptionDoc {
        key: "floating_point_behaviour.inv",
        kind: "bool",
        description: "An IEEE-754 invalid operation raises an exception: the run stops naming the compute set, tile and element.",
    },
    OptionDoc {
        key: "floating_point_behaviour.div0",
        kind: "bool",
        description: "A division by zero raises an exception.",
    },
    OptionDoc {
        key: "floating_point_behaviour.oflo",
        kind: "bool",
        description: "An overflow raises an exception.",
    },
    OptionDoc {
        key: "floating_point_behaviour.esr",
        kind: "bool",
        description: "Stochastic rounding of f16 results.",
    },
    OptionDoc {
        key: "floating_point_behaviour.nanoo",
        kind: "bool",
        description: "NaN-on-overflow mode: an overflow gives NaN instead of an infinity.",
    },
    OptionDoc {
        key: "floating_point_behaviour.set_all",
        kind: "bool",
        description: "Enables all five above.",
    },
    OptionDoc {
        key: "floating_point_behaviour.esr_seed",
        kind: "int",
        description: "ipuxla's own: the seed stochastic rounding starts from (the seed's reset_ipu_seed).",
    },
    OptionDoc {
        key: "scheduling.algorithm",
        kind: "SchedulingAlgorithm",
        description: "The instruction scheduler: CHOOSE_BEST, CLUSTERING, POST_ORDER, LOOK_AHEAD or SHORTEST_PATH.",
    },
    OptionDoc {
        key: "scheduling.maximum_scheduler_lookahead_depth",
        kind: "int",
        description: "LOOK_AHEAD only: how far beyond a decision to look.",
    },
    OptionDoc {
        key: "scheduling.maximum_scheduler_search_space_size",
        kind: "int",
        description: "LOOK_AHEAD only: a cap on the search space, to guarantee termination.",
    },
    OptionDoc {
        key: "optimizations.prefetch_data_streams",
        kind: "bool",
        description: "Overlap host data-stream preparation with IPU execution (what the IPU Model charges); false is refused, no source gives the latency it would add.",
    },
    OptionDoc {
        key: "optimizations.combine_matmuls",
        kind: "bool",
        description: "Combine matrix products that share the same weights or the same input.",
    },
    OptionDoc {
        key: "optimizations.enable_graph_outlining",
        kind: "bool",
        description: "Repeated regions of the same ops on the same shapes share one body of code, each use copying its inputs in and results out: less code in tile memory, more cycles. Calls marked as outlined functions are shared either way.",
    },
    OptionDoc {
        key: "optimizations.enable_fast_math",
        kind: "bool",
        description: "Allow float rewrites without IEEE guarantees (x * 0 = 0).",
    },
    OptionDoc {
        key: "optimizations.egraph.enabled",
        kind: "bool",
        description: "ipuxla's own: run the e-graph optimiser.",
    },
    OptionDoc {
        key: "optimizations.egraph.node_limit",
        kind: "int",
        description: "ipuxla's own: e-graph nodes at which saturation stops.",
    },
    OptionDoc {
        key: "optimizations.egraph.iteration_limit",
        kind: "int",
        description: "ipuxla's own: rewrite iterations at which saturation stops.",
    },
    OptionDoc {
        key: "optimizations.egraph.time_limit_seconds",
        kind: "float",
        description: "ipuxla's own: seconds at which saturation stops.",
    },
    OptionDoc {
        key: "allow_recompute",
        kind: "bool",
        description: "Recompute forward values before their late reads instead of keeping them live (cheap element-wise ops, conversions, data movement; never stateful ops, reductions, products or checkpointed values): lower peak memory for at most 30 % more work. The `recomputation` pass's report gives the estimator's peak before and after.",
    },
    OptionDoc {
        key: "selection_order",
        kind: "SelectionOrder",
        description: "How the program's IPUs are placed on the ladder: AUTO, ZIGZAG, SNAKE or HOOF.",
    },
    OptionDoc {
        key: "pipelining.pipeline_schedule",
        kind: "PipelineSchedule",
        description: "Grouped, Interleaved or Sequential.",
    },
    OptionDoc {
        key: "pipelining.recomputation_mode",
        kind: "RecomputationMode",
        description: "With allow_recompute, how a training pipeline's stages recompute their forward passes: Auto (RecomputeThenBackpropagate for Grouped and Interleaved, RecomputeAndBackpropagateInterleaved for Sequential), RecomputeThenBackpropagate or RecomputeAndBackpropagateInterleaved. Without allow_recompute a mode other than Auto is an error.",
    },
    OptionDoc {
        key: "pipelining.device_mapping",
        kind: "list[int]",
        description: "The IPU of each pipeline stage (empty: stage K on IPU K).",
    },
    OptionDoc {
        key: "device_loop.iterations_per_loop",
        kind: "int or null",
        description: "Steps per device execution (the seed's iterations_per_loop, Keras steps_per_execution); `ipuxla run --iterations`.",
    },
    OptionDoc {
        key: "device_loop.outfeed_mode",
        kind: "OutfeedMode",
        description: "What the host keeps of values produced every iteration: ALL or LAST.",
    },
    OptionDoc {
        key: "executable_cache_path",
        kind: "str",
        description: "A directory for compiled executables (TensorFlow for IPU's executable cache): a module compiled to run is stored there, keyed by its text, the config, the pass options, the device loop and ipuxla's version, and later runs read it instead of compiling. A truncated, corrupt or other-build entry is reported as a warning and compiled again. \"\" (the default) caches nothing.",
    },
];

/// One option of a config: its documentation, default and value.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionRow {
    /// The option.
    pub doc: OptionDoc,
    /// Its default (JSON).
    pub default: Value,
    /// Its value in the config (JSON).
    pub value: Value,
}

/// The value at a dotted key of a config's JSON form.
pub fn lookup<'v>(json: &'v Value, key: &str) -> Option<&'v Value> {
    key.split('.').try_fold(json, |v, part| v.get(part))
}

/// Every option of `config` with its default and value.
pub fn rows(config: &IpuConfig) -> Vec<OptionRow> {
    let current = serde_json::to_value(config).expect("the config serialises");
    let default = serde_json::to_value(IpuConfig::default()).expect("the config serialises");
    OPTIONS
        .iter()
        .map(|doc| OptionRow {
            doc: *doc,
            default: lookup(&default, doc.key).cloned().unwrap_or(Value::Null),
            value: lookup(&current, doc.key).cloned().unwrap_or(Value::Null),
        })
        .collect()
}

/// The dotted keys of a config's JSON form: its leaves (objects other than planner
/// options are walked into).
pub fn keys(json: &Value) -> Vec<String> {
    fn walk(v: &Value, prefix: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(map) if !prefix.ends_with("poplar_options") => {
                for (k, v) in map {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(v, &key, out);
                }
            }
            _ => out.push(prefix.to_string()),
        }
    }
    let mut out = Vec::new();
    walk(json, "", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_the_config_is_documented_once() {
        let json = serde_json::to_value(IpuConfig::default()).unwrap();
        let mut have = keys(&json);
        have.sort();
        let mut documented: Vec<String> = OPTIONS.iter().map(|o| o.key.to_string()).collect();
        documented.sort();
        assert_eq!(have, documented);
    }
}
