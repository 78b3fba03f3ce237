//! Progress on stderr for work that takes a while (compiling, loading, simulating, bench
//! cases): an `indicatif` spinner or bar that appears only after a delay (1 s, or
//! `IPUXLA_PROGRESS_DELAY_MS`), only when stderr is a terminal, never after
//! [`set_quiet`]; it clears itself when the work ends, so piped output never holds one.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

static QUIET: AtomicBool = AtomicBool::new(false);

/// The indicator showing now, if any, and its own message: what [`phase`] adds to.
static CURRENT: Mutex<Option<(u64, ProgressBar, String)>> = Mutex::new(None);

/// Numbers the indicators, so a finished one clears only itself from [`CURRENT`].
static NEXT: AtomicU64 = AtomicU64::new(0);

/// True after `--quiet`: commands print no progress or summaries.
pub fn is_quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Turns progress off (`--quiet`).
pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

fn delay() -> Duration {
    let ms = std::env::var("IPUXLA_PROGRESS_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(1000);
    Duration::from_millis(ms)
}

/// Work in progress; dropping it clears the indicator.
pub struct Progress {
    bar: ProgressBar,
    id: u64,
}

impl Progress {
    /// A spinner saying `message`.
    pub fn spinner(message: impl Into<String>) -> Progress {
        let style =
            ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("a valid template");
        Progress::start(ProgressBar::hidden().with_style(style), message)
    }

    /// A bar of `len` items saying `message`.
    pub fn bar(len: u64, message: impl Into<String>) -> Progress {
        let style = ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]")
            .expect("a valid template");
        let bar = ProgressBar::hidden().with_style(style);
        bar.set_length(len);
        Progress::start(bar, message)
    }

    fn start(bar: ProgressBar, message: impl Into<String>) -> Progress {
        let message = message.into();
        bar.set_message(message.clone());
        let shown = !QUIET.load(Ordering::Relaxed) && std::io::stderr().is_terminal();
        if shown {
            let later = bar.clone();
            let wait = delay();
            std::thread::spawn(move || {
                std::thread::sleep(wait);
                if !later.is_finished() {
                    later.set_draw_target(ProgressDrawTarget::stderr());
                    later.enable_steady_tick(Duration::from_millis(100));
                }
            });
        }
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        *CURRENT.lock().expect("no holder panics") = Some((id, bar.clone(), message));
        Progress { bar, id }
    }

    /// Says what is happening now.
    pub fn set_message(&self, message: impl Into<String>) {
        let message = message.into();
        self.bar.set_message(message.clone());
        if let Some((id, _, own)) = CURRENT.lock().expect("no holder panics").as_mut()
            && *id == self.id
        {
            *own = message;
        }
    }

    /// Runs `f` with the indicator out of the way (to print a line).
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// One more item done.
    pub fn inc(&self) {
        self.bar.inc(1);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
        let mut current = CURRENT.lock().expect("no holder panics");
        if current.as_ref().is_some_and(|(id, ..)| *id == self.id) {
            *current = None;
        }
    }
}

/// Whether an indicator is in progress (so that telling it something is worth the work).
pub fn active() -> bool {
    CURRENT.lock().expect("no holder panics").is_some()
}

/// Tells the indicator showing now (if any) what is happening: a library call's phases
/// ("compiling", "loading", ...) under the command's spinner.
pub fn phase(message: impl Into<String>) {
    if let Some((_, bar, own)) = CURRENT.lock().expect("no holder panics").as_ref() {
        bar.set_message(format!("{own}: {}", message.into()));
    }
}

/// Clears the indicator showing now, if any: the work is done and results follow.
pub fn finish() {
    if let Some((_, bar, _)) = CURRENT.lock().expect("no holder panics").take() {
        bar.finish_and_clear();
    }
}

/// A `tracing` layer that tells the indicator which compiler pass or phase runs (the `pass`
/// spans of `compiler::passes`, target `ipuxla::pass`, and the compiler's `phase` spans,
/// target `ipuxla::phase`); install it with a per-layer filter on [`PassLayer::TARGETS`]
/// (see the binary's `main`), so nothing else is dispatched to it.
pub struct PassLayer;

impl PassLayer {
    /// The span targets it reads.
    pub const TARGETS: [&str; 2] = ["ipuxla::pass", "ipuxla::phase"];
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PassLayer {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Name(Option<String>);
        impl tracing::field::Visit for Name {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "name" {
                    self.0 = Some(value.to_string());
                }
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "name" {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        let mut name = Name(None);
        attrs.record(&mut name);
        if let Some(name) = name.0 {
            phase(if attrs.metadata().target() == "ipuxla::pass" {
                format!("compiling: pass {name}")
            } else {
                format!("compiling: {name}")
            });
        }
    }
}
