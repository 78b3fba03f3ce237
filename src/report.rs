//! A profile as one self-contained HTML page (`ipuxla report`): no network, no scripts,
//! charts drawn as inline SVG here. Per IPU, a heat map of its tiles' memory (always-live
//! share inset); the compiler's liveness curve over the program with its peak marked; the
//! cycles of the steps as stacked bars (compute, exchange, sync); the largest tensors; and
//! per-IPU totals. Numbers the page shows carry ids (`total-cycles`, `peak-tile-bytes`,
//! `peak-live-bytes`, ...) so a browser test can read them back.

use runtime::Profile;
use std::fmt::Write;

/// Bars at most in the cycles chart (steps are summed into buckets beyond that).
const MAX_BARS: usize = 400;
/// Points at most on the liveness curve (each keeps its bucket's largest value).
const MAX_POINTS: usize = 2000;

/// `text` safe inside HTML.
fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A colour from pale (0) to deep red (1).
fn heat(f: f64) -> String {
    let f = f.clamp(0.0, 1.0);
    let (r, g, b) = (
        255.0 - 60.0 * f,
        245.0 - 210.0 * f.sqrt(),
        230.0 - 200.0 * f.sqrt(),
    );
    format!("rgb({},{},{})", r as u8, g as u8, b as u8)
}

/// The page for `runs` (a title for each, and its profile), titled `title`.
pub fn html(title: &str, runs: &[(String, &Profile)]) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>{}</style></head><body>\n<h1>{}</h1>\n",
        esc(title),
        STYLE,
        esc(title)
    );
    for (k, (name, p)) in runs.iter().enumerate() {
        let id = |what: &str| {
            if runs.len() == 1 {
                what.to_string()
            } else {
                format!("{what}-{k}")
            }
        };
        if runs.len() > 1 {
            let _ = writeln!(s, "<h2>{}</h2>", esc(name));
        }
        summary(&mut s, p, &id);
        heat_maps(&mut s, p);
        liveness(&mut s, p, &id);
        cycles(&mut s, p);
        tensors(&mut s, p, &id);
        peak_tile_contents(&mut s, p, &id);
        ipu_totals(&mut s, p, &id);
    }
    s.push_str("</body></html>\n");
    s
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222}\
table{border-collapse:collapse;margin:8px 0 24px}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
th{background:#f3f3f3}td.name{text-align:left;font-family:monospace}\
svg{background:#fff;border:1px solid #ddd;margin:4px 0 20px}\
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}";

fn summary(s: &mut String, p: &Profile, id: &dyn Fn(&str) -> String) {
    let peak = p.peak_tile();
    let total: u64 = p.tiles.iter().map(|t| t.bytes_used).sum();
    let _ = writeln!(
        s,
        "<table><tr><th>target</th><th>IPUs</th><th>cycles</th><th>simulated time</th><th>compute / exchange / sync cycles</th><th>peak tile</th><th>memory in use</th></tr>\
<tr><td>{}</td><td>{}</td><td id=\"{}\">{}</td><td>{:.3} us</td><td>{} / {} / {}</td><td id=\"{}\">{}</td><td id=\"{}\">{}</td></tr></table>",
        esc(&p.target),
        p.num_ipus,
        id("total-cycles"),
        p.total_cycles,
        p.seconds * 1e6,
        p.totals.compute_cycles,
        p.totals.exchange_cycles,
        p.totals.sync_cycles,
        id("peak-tile-bytes"),
        peak.map_or(0, |t| t.bytes_used),
        id("total-bytes"),
        total
    );
}

fn heat_maps(s: &mut String, p: &Profile) {
    let per_ipu = if p.tiles_per_ipu > 0 {
        p.tiles_per_ipu
    } else {
        p.tiles.iter().map(|t| t.tile + 1).max().unwrap_or(1)
    };
    let capacity = p
        .tiles
        .first()
        .map_or(1, |t| (t.bytes_used + t.bytes_free).max(1));
    // Colours run from 0 to the busiest tile (a share of the capacity would leave a lightly
    // used IPU uniformly pale).
    let busiest = p
        .tiles
        .iter()
        .map(|t| t.bytes_used)
        .max()
        .unwrap_or(0)
        .max(1);
    let cols = ((per_ipu as f64 * 2.0).sqrt().ceil() as usize).max(1);
    let rows = per_ipu.div_ceil(cols);
    let cell = 10;
    for ipu in 0..p.num_ipus.max(1) {
        let _ = writeln!(
            s,
            "<h3>IPU {ipu}: tile memory</h3><div class=\"legend\">each square a tile, its colour its bytes in use, the inset its bytes live for the whole program, from 0 to the busiest tile's {busiest} B ({:.1}% of a tile's {capacity} B)<span style=\"background:{}\"></span>0<span style=\"background:{}\"></span>{}<span style=\"background:{}\"></span>{busiest} B</div>",
            100.0 * busiest as f64 / capacity as f64,
            heat(0.0),
            heat(0.5),
            busiest / 2,
            heat(1.0)
        );
        let _ = writeln!(
            s,
            "<svg class=\"heatmap\" width=\"{}\" height=\"{}\" role=\"img\" aria-label=\"IPU {ipu} tile memory\">",
            cols * cell + 2,
            rows * cell + 2
        );
        for t in p.tiles.iter().filter(|t| t.ipu == ipu) {
            let (x, y) = ((t.tile % cols) * cell + 1, (t.tile / cols) * cell + 1);
            let used = t.bytes_used as f64 / busiest as f64;
            let always = t.always_live_bytes as f64 / busiest as f64;
            let _ = writeln!(
                s,
                "<g><title>IPU {ipu} tile {}: {} B in use ({} B always live) of {capacity} B</title><rect x=\"{x}\" y=\"{y}\" width=\"{}\" height=\"{}\" fill=\"{}\"/><rect x=\"{}\" y=\"{}\" width=\"4\" height=\"4\" fill=\"{}\"/></g>",
                t.tile,
                t.bytes_used,
                t.always_live_bytes,
                cell - 1,
                cell - 1,
                heat(used),
                x + 2,
                y + 2,
                heat(always)
            );
        }
        s.push_str("</svg>\n");
    }
}

fn liveness(s: &mut String, p: &Profile, id: &dyn Fn(&str) -> String) {
    s.push_str("<h3>Liveness over the program (as compiled; loop bodies once)</h3>\n");
    if p.liveness.is_empty() {
        s.push_str("<p>The profile holds no liveness (written by an engine run, not by <code>ipuxla run --profile</code>).</p>\n");
        return;
    }
    let (w, h, pad) = (900.0, 240.0, 40.0);
    let n = p.liveness.len();
    let (peak_at, peak) = p
        .liveness
        .iter()
        .enumerate()
        .max_by_key(|(i, l)| (l.bytes, usize::MAX - i))
        .map(|(i, l)| (i, l.bytes))
        .expect("not empty");
    let bucket = n.div_ceil(MAX_POINTS).max(1);
    let x = |i: usize| pad + (w - 2.0 * pad) * i as f64 / (n.max(2) - 1) as f64;
    let y = |b: u64| h - pad - (h - 2.0 * pad) * b as f64 / peak.max(1) as f64;
    let points: Vec<String> = p
        .liveness
        .chunks(bucket)
        .enumerate()
        .map(|(c, chunk)| {
            let top = chunk.iter().map(|l| l.bytes).max().unwrap_or(0);
            format!("{:.1},{:.1}", x(c * bucket), y(top))
        })
        .collect();
    let _ = writeln!(
        s,
        "<svg class=\"liveness\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"liveness\">\
<line x1=\"{pad}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>\
<polyline fill=\"none\" stroke=\"#3366cc\" stroke-width=\"1.5\" points=\"{}\"/>\
<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"#cc3333\"><title>peak</title></circle>\
<text x=\"{pad}\" y=\"16\" font-size=\"12\">peak {peak} B live at step {peak_at} of {n}: {}</text>\
<text x=\"{pad}\" y=\"{}\" font-size=\"11\">step 0</text><text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">step {}</text></svg>",
        h - pad,
        w - pad,
        h - pad,
        points.join(" "),
        x(peak_at),
        y(peak),
        esc(&p.liveness[peak_at].step),
        h - pad + 16.0,
        w - pad,
        h - pad + 16.0,
        n - 1
    );
    let _ = writeln!(
        s,
        "<p>Peak: <span id=\"{}\">{peak}</span> B at <span id=\"{}\">{}</span>.</p>",
        id("peak-live-bytes"),
        id("peak-live-step"),
        esc(&p.liveness[peak_at].step)
    );
}

fn cycles(s: &mut String, p: &Profile) {
    let counted: Vec<&runtime::StepProfile> = p.steps.iter().filter(|s| s.cycles > 0).collect();
    let _ = writeln!(
        s,
        "<h3>Cycles per step ({} steps{})</h3><div class=\"legend\"><span style=\"background:#3366cc\"></span>compute<span style=\"background:#ff9900\"></span>exchange<span style=\"background:#999999\"></span>sync</div>",
        counted.len(),
        if counted.len() > MAX_BARS {
            format!(", summed into {MAX_BARS} bars")
        } else {
            String::new()
        }
    );
    if counted.is_empty() {
        return;
    }
    let bucket = counted.len().div_ceil(MAX_BARS).max(1);
    let bars: Vec<(u64, u64, u64, String)> = counted
        .chunks(bucket)
        .map(|c| {
            let sum = |f: fn(&runtime::StepProfile) -> u64| c.iter().map(|s| f(s)).sum::<u64>();
            let name = if c.len() == 1 {
                c[0].name.clone()
            } else {
                format!("{} .. {}", c[0].name, c[c.len() - 1].name)
            };
            (
                sum(|s| s.compute_cycles + s.paging_cycles),
                sum(|s| s.exchange_cycles),
                sum(|s| s.sync_cycles),
                name,
            )
        })
        .collect();
    let top = bars
        .iter()
        .map(|b| b.0 + b.1 + b.2)
        .max()
        .unwrap_or(1)
        .max(1);
    let (w, h, pad) = (900.0, 240.0, 30.0);
    let bw = (w - 2.0 * pad) / bars.len() as f64;
    let _ = writeln!(
        s,
        "<svg class=\"cycles\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"cycles per step\">"
    );
    for (i, (c, e, y0, name)) in bars.iter().enumerate() {
        let x = pad + i as f64 * bw;
        let mut base = h - pad;
        let _ = write!(
            s,
            "<g><title>{}: compute {c}, exchange {e}, sync {y0} cycles</title>",
            esc(name)
        );
        for (v, colour) in [(c, "#3366cc"), (e, "#ff9900"), (y0, "#999999")] {
            let bh = (h - 2.0 * pad) * *v as f64 / top as f64;
            base -= bh;
            let _ = write!(
                s,
                "<rect x=\"{x:.2}\" y=\"{base:.2}\" width=\"{:.2}\" height=\"{bh:.2}\" fill=\"{colour}\"/>",
                bw.max(0.5)
            );
        }
        s.push_str("</g>\n");
    }
    let _ = writeln!(
        s,
        "<text x=\"{pad}\" y=\"16\" font-size=\"12\">tallest bar {top} cycles</text></svg>"
    );
}

fn tensors(s: &mut String, p: &Profile, id: &dyn Fn(&str) -> String) {
    let _ = writeln!(
        s,
        "<h3>Largest tensors</h3><table id=\"{}\"><tr><th>tensor</th><th>bytes</th><th>tiles</th><th>always live</th></tr>",
        id("largest-tensors")
    );
    for t in &p.largest_tensors {
        let _ = writeln!(
            s,
            "<tr><td class=\"name\">{}</td><td class=\"bytes\">{}</td><td>{}</td><td>{}</td></tr>",
            esc(&t.name),
            t.bytes,
            t.tiles,
            if t.always_live { "yes" } else { "" }
        );
    }
    s.push_str("</table>\n");
}

/// What the busiest tile holds at its peak: every tensor live there then.
fn peak_tile_contents(s: &mut String, p: &Profile, id: &dyn Fn(&str) -> String) {
    let Some(c) = &p.peak_tile_contents else {
        return;
    };
    let _ = writeln!(
        s,
        "<h3>IPU {} tile {} at its peak ({})</h3><table id=\"{}\"><tr><th>tensor</th><th>bytes on the tile</th><th>always live</th></tr>",
        c.ipu,
        c.tile,
        esc(&c.step),
        id("peak-tile")
    );
    for t in &c.tensors {
        let _ = writeln!(
            s,
            "<tr><td class=\"name\">{}</td><td class=\"bytes\">{}</td><td>{}</td></tr>",
            esc(&t.name),
            t.bytes,
            if t.always_live { "yes" } else { "" }
        );
    }
    if c.others > 0 {
        let _ = writeln!(
            s,
            "<tr><td class=\"name\">{} more</td><td class=\"bytes\">{}</td><td></td></tr>",
            c.others, c.others_bytes
        );
    }
    s.push_str("</table>\n");
}

fn ipu_totals(s: &mut String, p: &Profile, id: &dyn Fn(&str) -> String) {
    let _ = writeln!(
        s,
        "<h3>Per IPU</h3><table id=\"{}\"><tr><th>IPU</th><th>tiles in use</th><th>peak tile B</th><th>memory B</th><th>always live B</th><th>busy cycles</th><th>B over IPU-Links</th></tr>",
        id("ipu-totals")
    );
    for ipu in 0..p.num_ipus.max(1) {
        let tiles: Vec<_> = p.tiles.iter().filter(|t| t.ipu == ipu).collect();
        let activity = p.ipus.get(ipu);
        let _ = writeln!(
            s,
            "<tr><td>{ipu}</td><td>{}</td><td>{}</td><td class=\"bytes\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            tiles.len(),
            tiles.iter().map(|t| t.bytes_used).max().unwrap_or(0),
            tiles.iter().map(|t| t.bytes_used).sum::<u64>(),
            tiles.iter().map(|t| t.always_live_bytes).sum::<u64>(),
            activity.map_or(p.total_cycles, |a| a.busy_cycles),
            activity.map_or(p.totals.bytes_over_links, |a| a.bytes_over_links),
        );
    }
    s.push_str("</table>\n");
}
