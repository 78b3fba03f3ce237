use super::*;
use crate::lower::conv_codelet::{ConvCodelet, SharedPatches};
use std::collections::HashSet;
use std::sync::Arc;

/// A sort (an evaluating codelet), a convolution split over output features (vertices
/// sharing a patch matrix), an infeed and an outfeed.
const MODULE: &str = "HloModule stored

cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT lt = pred[] compare(a, b), direction=LT
}

ENTRY e {
  x = f32[1,8,8,16]{3,2,1,0} parameter(0)
  k = f32[3,3,16,64]{3,2,1,0} parameter(1)
  c = f32[1,8,8,64]{3,2,1,0} convolution(x, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  r = f32[64,64]{1,0} reshape(c)
  s = f32[64,64]{1,0} sort(r), dimensions={1}, to_apply=cmp
  tok = token[] after-all()
  in = (f32[4]{0}, token[]) infeed(tok), infeed_config=\"extra\"
  v = f32[4]{0} get-tuple-element(in), index=0
  t2 = token[] get-tuple-element(in), index=1
  out = token[] outfeed(v, t2), outfeed_config=\"seen\"
  ROOT res = (f32[64,64]{1,0}, f32[4]{0}) tuple(s, v)
}
";

fn config() -> IpuConfig {
    let mut c = IpuConfig::default();
    c.ipu_model.tiles_per_ipu = 8;
    c
}

fn compiled() -> (Source, Compiled) {
    let module = xla_ir::parse_module(MODULE).unwrap();
    let options = PassOptions::default();
    let compiled = crate::compile_with_options(&module, &config(), &options).unwrap();
    (Source::new(&module, &config(), &options, None), compiled)
}

/// The groups of codelets sharing a patch matrix, as sets of codelet indices.
fn sharing_groups(c: &Compiled) -> Vec<Vec<usize>> {
    let mut groups: Vec<(*const SharedPatches, Vec<usize>)> = Vec::new();
    for (k, codelet) in c.executable.codelets.iter().enumerate() {
        let Some((_, Some(shared))) = codelet
            .0
            .as_any()
            .and_then(|a| a.downcast_ref::<ConvCodelet>())
            .and_then(ConvCodelet::source)
        else {
            continue;
        };
        let at = Arc::as_ptr(shared);
        match groups.iter_mut().find(|(p, _)| *p == at) {
            Some((_, members)) => members.push(k),
            None => groups.push((at, vec![k])),
        }
    }
    groups.into_iter().map(|(_, m)| m).collect()
}

#[test]
fn an_executable_read_back_is_the_one_written() {
    let (source, compiled) = compiled();
    let bytes = encode(&source, &compiled).unwrap();
    let file = parse(&bytes).unwrap();
    assert_eq!(file.build, build_id());
    assert_eq!(file.source().unwrap(), source);
    let back = file.compiled().unwrap();

    let mut a = compiled.executable.clone();
    let mut b = back.executable.clone();
    let names = |e: &runtime::Executable| -> Vec<String> {
        e.codelets.iter().map(|c| c.0.name().to_string()).collect()
    };
    assert_eq!(names(&a), names(&b));
    let kinds: HashSet<bool> = a
        .codelets
        .iter()
        .map(|c| {
            c.0.as_any()
                .is_some_and(|x| x.downcast_ref::<ConvCodelet>().is_some())
        })
        .collect();
    assert_eq!(kinds.len(), 2, "the module has both kinds of codelet");
    a.codelets.clear();
    b.codelets.clear();
    assert_eq!(a, b);
    let groups = sharing_groups(&compiled);
    // Parts of equal shapes run one codelet, so the parts sharing a patch matrix are the
    // vertices running the codelets of one group.
    let runs = |k: usize| -> usize {
        (compiled.executable.compute_sets.iter())
            .flat_map(|cs| &cs.codelet_vertices)
            .filter(|v| v.codelet.0 as usize == k)
            .count()
    };
    assert!(
        groups
            .iter()
            .any(|g| g.iter().map(|&k| runs(k)).sum::<usize>() > 1),
        "the convolution's parts share patches: {groups:?}"
    );
    assert_eq!(sharing_groups(&back), groups);
    for (x, y) in [
        (&compiled.inputs, &back.inputs),
        (&compiled.outputs, &back.outputs),
    ] {
        assert_eq!(format!("{x:?}"), format!("{y:?}"));
    }
    assert_eq!(
        format!("{:?}", compiled.infeeds),
        format!("{:?}", back.infeeds)
    );
    assert_eq!(
        format!("{:?}", compiled.outfeeds),
        format!("{:?}", back.outfeeds)
    );
    assert_eq!(compiled.infeeds.len(), 1);
    assert_eq!(compiled.warnings, back.warnings);
    // Written again, the same bytes.
    assert_eq!(encode(&source, &back).unwrap(), bytes);
}

#[test]
fn a_damaged_file_is_refused_and_says_how() {
    let (source, compiled) = compiled();
    let bytes = encode(&source, &compiled).unwrap();

    for cut in [0, 5, 12, 20, bytes.len() / 2, bytes.len() - 1] {
        let err = match parse(&bytes[..cut]) {
            // Cut in the executable: the source is whole, the executable refused.
            Ok(file) => {
                assert_eq!(file.source().unwrap(), source, "cut at {cut}");
                file.compiled().unwrap_err()
            }
            Err(e) => e,
        };
        let expected = if cut < MAGIC.len() {
            matches!(err, StoreError::NotAnExecutable)
        } else {
            matches!(err, StoreError::Truncated { .. })
        };
        assert!(expected, "cut at {cut}: {err}");
    }

    let mut flipped = bytes.clone();
    let last = flipped.len() - 10;
    flipped[last] ^= 0x40;
    let file = parse(&flipped).unwrap();
    assert_eq!(file.source().unwrap(), source, "the source is intact");
    let err = file.compiled().unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Corrupt {
                section: "executable",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("checksum"), "{err}");

    let mut other = bytes.clone();
    other[0] = b'J';
    assert_eq!(parse(&other).unwrap_err(), StoreError::NotAnExecutable);

    let mut other = bytes.clone();
    other[8] = 9;
    assert!(matches!(
        parse(&other).unwrap_err(),
        StoreError::OtherFormat { found: 9, .. }
    ));

    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        parse(&longer).unwrap().compiled().unwrap_err(),
        StoreError::Undecodable(_)
    ));
}

#[test]
fn a_file_from_another_build_gives_its_source_but_not_its_executable() {
    let (source, compiled) = compiled();
    let mut bytes = encode(&source, &compiled).unwrap();
    // The build's text starts after the magic, the format and its length.
    let at = MAGIC.len() + 8;
    assert_eq!(&bytes[at..at + 6], b"ipuxla");
    bytes[at] = b'I';
    let file = parse(&bytes).unwrap();
    assert_eq!(file.source().unwrap(), source);
    let err = file.compiled().unwrap_err();
    assert!(matches!(err, StoreError::OtherBuild { .. }), "{err}");
    assert!(err.to_string().contains("Ipuxla"), "{err}");
}

#[test]
fn the_key_changes_with_the_module_the_config_and_the_device_loop() {
    let module = xla_ir::parse_module(MODULE).unwrap();
    let options = PassOptions::default();
    let key =
        |m: &Module, c: &IpuConfig, lp: Option<&DeviceLoop>| Source::new(m, c, &options, lp).key();
    let base = key(&module, &config(), None);
    assert_eq!(base.len(), 32);
    assert_eq!(
        key(&module, &config(), None),
        base,
        "the same source, the same key"
    );
    let mut other = config();
    other.ipu_model.tiles_per_ipu = 16;
    assert_ne!(key(&module, &other, None), base);
    let mut renamed = module.clone();
    renamed.name = "renamed".into();
    assert_ne!(key(&renamed, &config(), None), base);
    let lp = DeviceLoop {
        iterations: 2,
        fed: vec![false, false],
        resident: false,
    };
    assert_ne!(key(&module, &config(), Some(&lp)), base);
    let stop = PassOptions {
        stop_after: Some("dce".into()),
        ..PassOptions::default()
    };
    assert_ne!(Source::new(&module, &config(), &stop, None).key(), base);
}

/// Bytes with a good checksum that were never written by ipuxla (a bug, or a forged file)
/// are refused without a panic, however they are cut or altered.
#[test]
fn undecodable_payloads_are_errors_not_panics() {
    let (_, compiled) = compiled();
    let bytes = payload::encode(&compiled).unwrap();
    assert!(payload::decode(&bytes).is_ok());
    let step = (bytes.len() / 97).max(1);
    for cut in (0..bytes.len()).step_by(step) {
        assert!(payload::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..300 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut altered = bytes.clone();
        let at = (state % bytes.len() as u64) as usize;
        altered[at] = altered[at].wrapping_add((state >> 32) as u8 | 1);
        // Either refused, or an executable of the same size: never a panic.
        let _ = payload::decode(&altered);
    }
}
