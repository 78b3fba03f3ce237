//! Compiled executables on disk: what `ipuxla compile -o FILE.ipux` writes and the
//! executable cache holds, read back without compiling (the seed's pre-compilation and
//! executable caches).
//!
//! A file is a header and two sections, each with its length and an xxh3 checksum:
//!
//! | bytes | what |
//! |---|---|
//! | 8 | [`MAGIC`] |
//! | 4 | [`FORMAT_VERSION`], little-endian |
//! | 4 + n | the build that wrote it ([`build_id`]): length, UTF-8 |
//! | 16 + n | the source: length, checksum, JSON ([`Source`]: the module's text, the config) |
//! | 16 + n | the compiled executable: length, checksum, postcard bytes |
//!
//! The source is JSON so that a file from another build can still say what it was compiled
//! from (and be compiled again); the executable is only read by the build that wrote it. A
//! short file, a checksum that does not match, another format or another build is an
//! error ([`StoreError`]): a stored executable is never half-loaded.

mod packed;
mod payload;

use crate::{Compiled, DeviceLoop, IpuConfig, PassOptions};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::OnceLock;
use xla_ir::Module;
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

/// The first bytes of every stored executable.
pub const MAGIC: &[u8; 8] = b"IPUXLA\x00X";

/// The layout of the header and sections; a file of another version is not read.
pub const FORMAT_VERSION: u32 = 7;

/// Why a stored executable cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The bytes do not start with [`MAGIC`].
    #[error("not an ipuxla executable (it does not start with ipuxla's header)")]
    NotAnExecutable,
    /// Written in another layout.
    #[error("an executable in format {found}; this ipuxla reads format {ours}")]
    OtherFormat {
        /// The file's.
        found: u32,
        /// This build's.
        ours: u32,
    },
    /// Shorter than its header says.
    #[error("truncated: {what} needs {needed} bytes, {left} are left")]
    Truncated {
        /// The part cut short.
        what: &'static str,
        /// Bytes it needs.
        needed: u64,
        /// Bytes the file has left.
        left: u64,
    },
    /// A section's bytes are not the ones written.
    #[error(
        "corrupt: the checksum of its {section} does not match (0x{found:016x}, written 0x{written:016x})"
    )]
    Corrupt {
        /// "source" or "executable".
        section: &'static str,
        /// Checksum of the bytes read.
        found: u64,
        /// Checksum written.
        written: u64,
    },
    /// Written by another build of ipuxla (its executables may differ from this build's).
    #[error("written by another build of ipuxla ({found}; this is {ours})")]
    OtherBuild {
        /// The writer's build.
        found: String,
        /// This build.
        ours: String,
    },
    /// Bytes with a good checksum that do not decode (a bug, or a forged file).
    #[error("cannot be decoded: {0}")]
    Undecodable(String),
    /// The executable holds a codelet that cannot be stored (one a library user supplied).
    #[error("its codelet '{0}' cannot be stored: only the compiler's own codelets can")]
    Unstorable(String),
    /// Reading or writing the file.
    #[error("{0}")]
    Io(String),
}

/// What an executable was compiled from: enough to compile it again, and the key of the
/// executable cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// The module, as HLO text (or a training pipeline's [`TrainingPipeline::text`], which
    /// only the cache reads).
    ///
    /// [`TrainingPipeline::text`]: crate::training_pipeline::TrainingPipeline::text
    pub module: String,
    /// The IpuConfig, as JSON.
    pub config: String,
    /// Compiled as a device loop.
    pub device_loop: Option<DeviceLoop>,
    /// The pass the pipeline stopped after (`--stop-after`).
    pub stop_after: Option<String>,
}

impl Source {
    /// The source of compiling `module` for `config` with `options` (as a device loop).
    pub fn new(
        module: &Module,
        config: &IpuConfig,
        options: &PassOptions,
        device_loop: Option<&DeviceLoop>,
    ) -> Source {
        Source {
            module: module.to_string(),
            config: config_text(config),
            device_loop: device_loop.cloned(),
            stop_after: options.stop_after.clone(),
        }
    }

    /// The source of compiling the training pipeline `pipeline` for `config`.
    pub fn of_pipeline(
        pipeline: &crate::training_pipeline::TrainingPipeline,
        config: &IpuConfig,
    ) -> Source {
        Source {
            module: pipeline.text(),
            config: config_text(config),
            device_loop: None,
            stop_after: None,
        }
    }

    /// The config it was compiled for.
    pub fn config(&self) -> Result<IpuConfig, StoreError> {
        serde_json::from_str(&self.config)
            .map_err(|e| StoreError::Undecodable(format!("the config: {e}")))
    }

    /// The module it was compiled from.
    pub fn module(&self) -> Result<Module, StoreError> {
        xla_ir::parse_module(&self.module)
            .map_err(|e| StoreError::Undecodable(format!("the module: {e}")))
    }

    /// The executable cache's key, as 32 hex digits: the module, the config (with the
    /// target it describes), the pass options, the device loop, and ipuxla's version and
    /// file format. Another build of the same version gets the same key: its entry is found,
    /// refused ([`StoreError::OtherBuild`]) and replaced, rather than left behind.
    pub fn key(&self) -> String {
        let version = (env!("CARGO_PKG_VERSION"), FORMAT_VERSION);
        let text = serde_json::to_string(&(version, self))
            .expect("a Source serialises: strings, numbers, bools");
        format!("{:032x}", xxh3_128(text.as_bytes()))
    }
}

/// `config` as a source holds it: JSON, without where executables are cached (which does
/// not change what is compiled).
fn config_text(config: &IpuConfig) -> String {
    let mut config = config.clone();
    config.executable_cache_path.clear();
    serde_json::to_string(&config).expect("IpuConfig serialises: plain fields, strings as keys")
}

/// This build of ipuxla: its version and the binary's size and modification time (a
/// rebuilt binary may compile differently, so its executables are not read by another).
pub fn build_id() -> &'static str {
    static BUILD: OnceLock<String> = OnceLock::new();
    BUILD.get_or_init(|| {
        let binary = std::env::current_exe()
            .and_then(std::fs::metadata)
            .ok()
            .map(|m| {
                let modified = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                format!("{} bytes, modified {modified}", m.len())
            })
            .unwrap_or_else(|| "unknown binary".into());
        format!(
            "ipuxla {} format {FORMAT_VERSION} ({binary})",
            env!("CARGO_PKG_VERSION")
        )
    })
}

/// The file of `compiled`, compiled from `source`.
pub fn encode(source: &Source, compiled: &Compiled) -> Result<Vec<u8>, StoreError> {
    let source = serde_json::to_vec(source).expect("a Source serialises: strings, numbers, bools");
    let executable = payload::encode(compiled)?;
    let build = build_id().as_bytes();
    let mut out = Vec::with_capacity(48 + build.len() + source.len() + executable.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(build.len() as u32).to_le_bytes());
    out.extend_from_slice(build);
    for section in [&source, &executable] {
        out.extend_from_slice(&(section.len() as u64).to_le_bytes());
        out.extend_from_slice(&xxh3_64(section).to_le_bytes());
        out.extend_from_slice(section);
    }
    Ok(out)
}

/// Writes the file of `compiled` to `path`, through a temporary file renamed into place so
/// that a reader never sees half of it.
pub fn write(path: &Path, source: &Source, compiled: &Compiled) -> Result<(), StoreError> {
    let bytes = encode(source, compiled)?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, &bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            StoreError::Io(format!("writing {}: {e}", path.display()))
        })
}

/// A stored executable's parts, checked for length but not yet decoded.
#[derive(Debug, Clone)]
pub struct StoredFile<'a> {
    /// The build that wrote it.
    pub build: &'a str,
    source: Section<'a>,
    /// The executable's section, or why it cannot be read (the source may still be).
    executable: Result<Section<'a>, StoreError>,
}

#[derive(Debug, Clone, Copy)]
struct Section<'a> {
    name: &'static str,
    checksum: u64,
    bytes: &'a [u8],
}

impl Section<'_> {
    fn checked(&self) -> Result<&[u8], StoreError> {
        let found = xxh3_64(self.bytes);
        if found != self.checksum {
            return Err(StoreError::Corrupt {
                section: self.name,
                found,
                written: self.checksum,
            });
        }
        Ok(self.bytes)
    }
}

/// Reads the parts of a stored executable's bytes: an error when even the header or the
/// source cannot be read; a damaged executable section is reported by
/// [`StoredFile::compiled`].
pub fn parse(bytes: &[u8]) -> Result<StoredFile<'_>, StoreError> {
    let mut r = Reader { bytes };
    if r.take(MAGIC.len(), "the header").ok() != Some(&MAGIC[..]) {
        return Err(StoreError::NotAnExecutable);
    }
    let found = r.u32("the format version")?;
    if found != FORMAT_VERSION {
        return Err(StoreError::OtherFormat {
            found,
            ours: FORMAT_VERSION,
        });
    }
    let len = r.u32("the build's length")?;
    let build = std::str::from_utf8(r.take(len as usize, "the build")?)
        .map_err(|_| StoreError::Undecodable("the build is not UTF-8".into()))?;
    let source = r.section("source")?;
    // A file cut short in its executable still says what it was compiled from.
    let executable = r.section("executable").and_then(|e| match r.bytes.len() {
        0 => Ok(e),
        n => Err(StoreError::Undecodable(format!(
            "{n} bytes after the executable"
        ))),
    });
    Ok(StoredFile {
        build,
        source,
        executable,
    })
}

impl StoredFile<'_> {
    /// What it was compiled from (readable whichever build wrote it).
    pub fn source(&self) -> Result<Source, StoreError> {
        serde_json::from_slice(self.source.checked()?)
            .map_err(|e| StoreError::Undecodable(format!("the source: {e}")))
    }

    /// The executable, when this build wrote it and its bytes are intact.
    pub fn compiled(&self) -> Result<Compiled, StoreError> {
        if self.build != build_id() {
            return Err(StoreError::OtherBuild {
                found: self.build.to_string(),
                ours: build_id().to_string(),
            });
        }
        let executable = self.executable.as_ref().map_err(Clone::clone)?;
        payload::decode(executable.checked()?)
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], StoreError> {
        if self.bytes.len() < n {
            return Err(StoreError::Truncated {
                what,
                needed: n as u64,
                left: self.bytes.len() as u64,
            });
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, StoreError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, StoreError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(
            b.try_into().expect("take(8) is 8 bytes"),
        ))
    }

    fn section(&mut self, name: &'static str) -> Result<Section<'a>, StoreError> {
        let len = self.u64(name)?;
        let checksum = self.u64(name)?;
        let len = usize::try_from(len).map_err(|_| StoreError::Truncated {
            what: name,
            needed: len,
            left: self.bytes.len() as u64,
        })?;
        Ok(Section {
            name,
            checksum,
            bytes: self.take(len, name)?,
        })
    }
}

#[cfg(test)]
mod tests;
