//! The HLO parser and verifier on arbitrary bytes: any input is an error or a module that
//! prints, parses again and prints the same; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(module) = xla_ir::parse_module(text) {
        let _ = xla_ir::verify(&module);
        let printed = module.to_string();
        let again = xla_ir::parse_module(&printed)
            .unwrap_or_else(|e| panic!("the printed module does not parse: {e}\n{printed}"));
        assert_eq!(again.to_string(), printed, "printing is not stable");
    }
});
