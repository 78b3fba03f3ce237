//! Generated modules compiled for the IPU Model and compared with the reference evaluator
//! (`ipuxla::differential::check`): the fuzzer's bytes choose the generator's seed, size
//! and whether f16 arrays appear, so its coverage feedback steers the programs generated.
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
        ..Default::default()
    };
    if let Err(e) = ipuxla::differential::check(seed, &options) {
        panic!("seed {seed} ({options:?}): {e}");
    }
});
