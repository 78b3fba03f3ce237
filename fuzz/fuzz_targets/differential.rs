//! Generated modules compiled for the IPU Model and compared with the reference evaluator
//! (`ipuxla::differential::check`, or `check_replicated` for modules on 2 or 4 devices
//! with collectives): the fuzzer's bytes choose the generator's seed, size, whether f16
//! arrays and other layouts appear and the devices, so its coverage feedback steers the programs generated.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 10 {
        return;
    }
    let seed = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
    let options = xla_ir::generate::Options {
        instructions: 4 + (data[8] % 28) as usize,
        f16: data[9] & 1 == 1,
        replicas: [1, 1, 2, 4][(data[9] >> 1 & 3) as usize],
        layouts: data[9] & 8 == 0,
        ..Default::default()
    };
    let checked = match options.replicas {
        1 => ipuxla::differential::check(seed, &options),
        _ => ipuxla::differential::check_replicated(seed, &options),
    };
    if let Err(e) = checked {
        panic!("seed {seed} ({options:?}): {e}");
    }
});
