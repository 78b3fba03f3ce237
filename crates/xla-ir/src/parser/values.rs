//! Parsers for typed values: shapes and layouts, and the attribute forms of HLO text.

use super::ParseError;
use super::cursor::Cursor;
use crate::attributes::{
    CompareType, ComparisonDirection, ConvDims, FusionKind, PadDim, Precision, SliceDim, Window,
    WindowDim,
};
use crate::metadata::{FileLocation, FrontendAttributes, Metadata, StackFrame};
use crate::shape::{ArrayShape, Layout, Tile};
use crate::sharding::{Sharding, TileDevices};
use crate::{ElementType, Shape};

type Result<T> = std::result::Result<T, ParseError>;

/// Deepest nesting of tuple shapes and tuple shardings accepted (guards the stack).
const MAX_NESTING: usize = 64;

/// `f32[2,3]{1,0}`, `(f32[], s32[])`, `token[]`.
pub(crate) fn shape(c: &mut Cursor<'_>) -> Result<Shape> {
    shape_nested(c, 0)
}

fn shape_nested(c: &mut Cursor<'_>, depth: usize) -> Result<Shape> {
    if c.peek() == Some(b'(') {
        let open = c.pos();
        if depth >= MAX_NESTING {
            return Err(c.error_at(
                open,
                format!("tuple shapes nested deeper than {MAX_NESTING}"),
            ));
        }
        c.expect(b'(')?;
        let mut elems = Vec::new();
        if !c.eat(b')') {
            loop {
                elems.push(shape_nested(c, depth + 1)?);
                if c.eat(b')') {
                    break;
                }
                if !c.eat(b',') {
                    return Err(c.expected("',' or ')' in a tuple shape"));
                }
            }
        }
        return Ok(Shape::Tuple(elems));
    }
    let start = c.pos();
    let Some(word) = c.word() else {
        return Err(c.expected("a shape"));
    };
    if word == "token" {
        c.expect(b'[')?;
        c.expect(b']')?;
        return Ok(Shape::Token);
    }
    let element_type = ElementType::from_name(word).ok_or_else(|| {
        c.error_at(
            start,
            format!("expected a shape, found '{word}' (not an element type)"),
        )
    })?;
    if c.peek_raw() != Some(b'[') {
        return Err(c.expected(&format!("'[' after element type {word}")));
    }
    c.expect(b'[')?;
    let mut dims = crate::shape::Dims::new();
    if !c.eat(b']') {
        loop {
            match c.peek() {
                Some(b'<') | Some(b'?') => {
                    return Err(c.error_at(
                        c.pos(),
                        "dynamic dimensions ('<=N' or '?') are not supported; ipuxla needs static shapes",
                    ));
                }
                _ => {}
            }
            let dim_pos = c.pos();
            let d = c.int()?;
            if d < 0 {
                return Err(c.error_at(dim_pos, format!("dimension size {d} is negative")));
            }
            dims.push(d);
            if c.eat(b']') {
                break;
            }
            if !c.eat(b',') {
                return Err(c.expected("',' or ']' in dimensions"));
            }
        }
    }
    // A layout follows the dimensions directly, with no space (`f32[2]{0}`); a `{` after
    // a space is something else, such as the body of a computation.
    let layout = if c.peek_raw() == Some(b'{') {
        Some(layout(c, dims.len())?)
    } else {
        None
    };
    Ok(Shape::Array(ArrayShape {
        element_type,
        dims,
        layout,
    }))
}

/// `{1,0}` or `{1,0:T(8,128)(2,1)E(32)}`.
fn layout(c: &mut Cursor<'_>, rank: usize) -> Result<Layout> {
    let open = c.pos();
    c.expect(b'{')?;
    let mut layout = Layout::default();
    let mut sparse = false;
    let mut physical_shape = None;
    while matches!(c.peek(), Some(b'0'..=b'9')) {
        layout.minor_to_major.push(c.int()?);
        if !c.eat(b',') {
            break;
        }
    }
    if c.eat(b':') {
        loop {
            match c.peek() {
                Some(b'}') | None => break,
                Some(b'T') => {
                    c.expect(b'T')?;
                    while c.peek() == Some(b'(') {
                        c.expect(b'(')?;
                        let mut tile = Tile(Default::default());
                        loop {
                            if c.eat(b'*') {
                                tile.0.push(Tile::COMBINE);
                            } else {
                                tile.0.push(c.int()?);
                            }
                            if c.eat(b')') {
                                break;
                            }
                            c.expect(b',')?;
                        }
                        layout.tiles.push(tile);
                    }
                }
                Some(_) => {
                    // Other layout items (`E(32)`, `S(1)`, `L(..)`, ...) are kept verbatim.
                    let start = c.pos();
                    let item = c.word().ok_or_else(|| c.expected("a layout item"))?;
                    if !item.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
                        || c.peek_raw() != Some(b'(')
                    {
                        return Err(c.error_at(
                            start,
                            format!(
                                "expected a layout item such as T(..), E(..), S(..), D(..), found '{item}' not followed by '('"
                            ),
                        ));
                    }
                    let (value_start, value_end) = c.paren_group()?;
                    let value = c.slice(value_start, value_end);
                    match item {
                        "D" => sparse |= dim_level_types(c, value_start, value)?,
                        "P" => physical_shape = Some(start),
                        _ => {}
                    }
                    layout
                        .suffix_items
                        .push(c.slice(start, c.pos()).to_string());
                }
            }
        }
    }
    if !c.eat(b'}') {
        return Err(c.expected("'}' closing the layout"));
    }
    if let Some(at) = physical_shape.filter(|_| !sparse) {
        return Err(c.error_at(
            at,
            "Layout has physical shape, but is not for a sparse array (its D(..) dimension level types are all dense)",
        ));
    }
    if layout.minor_to_major.len() != rank {
        return Err(c.error_at(
            open,
            format!(
                "layout {layout} has {} entries but the shape has {rank} dimensions",
                layout.minor_to_major.len()
            ),
        ));
    }
    let mut seen = vec![false; rank];
    for &d in &layout.minor_to_major {
        match seen.get_mut(d as usize) {
            Some(s) if !*s && d >= 0 => *s = true,
            _ => {
                return Err(c.error_at(
                    open,
                    format!("layout {layout} is not a permutation of 0..{rank}"),
                ));
            }
        }
    }
    Ok(layout)
}

/// `(D,C+,S~)`: a sparse layout's dimension level types (dense, compressed, singleton,
/// loose compressed, each optionally `+` non-unique or `~` unordered); true when any is not
/// dense.
fn dim_level_types(c: &Cursor<'_>, at: usize, value: &str) -> Result<bool> {
    let inner = value
        .strip_prefix('(')
        .and_then(|v| v.strip_suffix(')'))
        .ok_or_else(|| c.error_at(at, "expected D(...) with dimension level types"))?;
    let mut sparse = false;
    for item in inner.split(',').map(str::trim) {
        let kind = item.trim_end_matches(['+', '~']);
        match kind {
            "D" => {}
            "C" | "S" | "H" => sparse = true,
            _ => {
                return Err(c.error_at(
                    at,
                    format!("expected a DimLevelType abbreviation (D, C, S or H), found '{item}'"),
                ));
            }
        }
    }
    Ok(sparse)
}

/// `{1,2,3}` (possibly empty).
pub(crate) fn int_list(c: &mut Cursor<'_>) -> Result<Vec<i64>> {
    c.expect(b'{')?;
    let mut out = Vec::new();
    if c.eat(b'}') {
        return Ok(out);
    }
    loop {
        out.push(c.int()?);
        if c.eat(b'}') {
            return Ok(out);
        }
        if !c.eat(b',') {
            return Err(c.expected("',' or '}'"));
        }
    }
}

/// The most ids an iota device list may hold (XLA's device counts are far below it).
const MAX_IOTA_IDS: i64 = 1 << 24;

/// Checks an iota form `<=[reshape]T(transpose)`: positive dimensions of a bounded element
/// count, and a transpose that is a permutation of them. Returns the element count.
fn check_iota(c: &Cursor<'_>, at: usize, reshape: &[i64], transpose: &[i64]) -> Result<i64> {
    let mut total: i64 = 1;
    for &d in reshape {
        total = match total.checked_mul(d) {
            Some(t) if d >= 1 && t <= MAX_IOTA_IDS => t,
            _ => {
                return Err(c.error_at(
                    at,
                    format!(
                        "the iota {reshape:?} needs positive dimensions of at most {MAX_IOTA_IDS} ids in all"
                    ),
                ));
            }
        };
    }
    if !transpose.is_empty() {
        let mut seen = vec![false; reshape.len()];
        let permutation = transpose.len() == reshape.len()
            && transpose.iter().all(|&p| {
                usize::try_from(p)
                    .ok()
                    .filter(|&p| p < seen.len())
                    .is_some_and(|p| !std::mem::replace(&mut seen[p], true))
            });
        if !permutation {
            return Err(c.error_at(
                at,
                format!(
                    "T{transpose:?} is not a permutation of the iota {reshape:?}'s {} dimensions",
                    reshape.len()
                ),
            ));
        }
    }
    Ok(total)
}

/// `{{0,1},{2,3}}` (possibly `{}`), or the iota form `[2,2]<=[4]` / `[2,2]<=[2,2]T(1,0)`.
pub(crate) fn replica_groups(c: &mut Cursor<'_>) -> Result<crate::collective::ReplicaGroups> {
    use crate::collective::ReplicaGroups;
    if c.peek() == Some(b'[') {
        let bracketed = |c: &mut Cursor<'_>| -> Result<Vec<i64>> {
            c.expect(b'[')?;
            let mut out = Vec::new();
            while !c.eat(b']') {
                out.push(c.int()?);
                if !c.eat(b',') && c.peek() != Some(b']') {
                    return Err(c.expected("',' or ']'"));
                }
            }
            Ok(out)
        };
        let start = c.pos();
        let shape = bracketed(c)?;
        let [g, s] = shape[..] else {
            return Err(c.expected("[groups,size] before '<='"));
        };
        if !c.eat_str("<=") {
            return Err(c.expected("'<=' in the iota form of replica_groups"));
        }
        let reshape = bracketed(c)?;
        let mut transpose = Vec::new();
        if c.eat(b'T') {
            c.expect(b'(')?;
            while !c.eat(b')') {
                transpose.push(c.int()?);
                if !c.eat(b',') && c.peek() != Some(b')') {
                    return Err(c.expected("',' or ')'"));
                }
            }
        }
        let total = check_iota(c, start, &reshape, &transpose)?;
        if g < 1 || s < 1 || g.checked_mul(s) != Some(total) {
            return Err(c.error_at(
                start,
                format!(
                    "replica_groups [{g},{s}] are not the {total} ids of the iota {reshape:?} (groups x size must be its element count)"
                ),
            ));
        }
        return Ok(ReplicaGroups::Iota {
            groups: [g, s],
            reshape,
            transpose,
        });
    }
    c.expect(b'{')?;
    let mut groups = Vec::new();
    while !c.eat(b'}') {
        groups.push(int_list(c)?);
        if !c.eat(b',') && c.peek() != Some(b'}') {
            return Err(c.expected("',' or '}'"));
        }
    }
    Ok(ReplicaGroups::Listed(groups))
}

/// `{{0,1},{1,2}}`: source-target pairs.
pub(crate) fn pairs(c: &mut Cursor<'_>) -> Result<Vec<(i64, i64)>> {
    c.expect(b'{')?;
    let mut out = Vec::new();
    while !c.eat(b'}') {
        let pos = c.pos();
        match int_list(c)?[..] {
            [s, t] => out.push((s, t)),
            _ => return Err(c.error_at(pos, "a source-target pair is {source,target}")),
        }
        if !c.eat(b',') && c.peek() != Some(b'}') {
            return Err(c.expected("',' or '}'"));
        }
    }
    Ok(out)
}

/// `true` or `false`.
pub(crate) fn boolean(c: &mut Cursor<'_>) -> Result<bool> {
    match c.word() {
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        _ => Err(c.expected("true or false")),
    }
}

/// `{true,false,..}`.
pub(crate) fn bool_list(c: &mut Cursor<'_>) -> Result<Vec<bool>> {
    c.expect(b'{')?;
    let mut out = Vec::new();
    while !c.eat(b'}') {
        out.push(boolean(c)?);
        if !c.eat(b',') && c.peek() != Some(b'}') {
            return Err(c.expected("',' or '}'"));
        }
    }
    Ok(out)
}

/// `{f32[2]{0}, (s32[], f32[3])}` (possibly empty).
pub(crate) fn shape_list(c: &mut Cursor<'_>) -> Result<Vec<Shape>> {
    c.expect(b'{')?;
    let mut out = Vec::new();
    while !c.eat(b'}') {
        out.push(shape(c)?);
        if !c.eat(b',') && c.peek() != Some(b'}') {
            return Err(c.expected("',' or '}'"));
        }
    }
    Ok(out)
}

/// `{mode=highest}` or `{tolerance={rtol=0.5, atol=1.0, ulps=2}}`, checked as XLA checks
/// it (the value is kept verbatim).
pub(crate) fn result_accuracy(c: &mut Cursor<'_>) -> Result<()> {
    c.expect(b'{')?;
    let name_pos = c.pos();
    let Some(name) = c
        .word()
        .filter(|w| !w.starts_with(|ch: char| ch.is_ascii_digit()))
    else {
        return Err(c.error_at(
            name_pos,
            "result_accuracy expects attribute name (mode or tolerance)",
        ));
    };
    c.expect(b'=')?;
    match name {
        "mode" => {
            let pos = c.pos();
            let mode = c.word().unwrap_or("");
            if !matches!(mode, "default" | "highest") {
                return Err(c.error_at(
                    pos,
                    format!("result_accuracy expects ResultAccuracy type but sees: {mode} (default or highest)"),
                ));
            }
        }
        "tolerance" => {
            c.expect(b'{')?;
            while !c.eat(b'}') {
                let pos = c.pos();
                match c.word() {
                    Some("rtol" | "atol") => {
                        c.expect(b'=')?;
                        c.number_token()?;
                    }
                    Some("ulps") => {
                        c.expect(b'=')?;
                        c.int()?;
                    }
                    other => {
                        return Err(c.error_at(
                            pos,
                            format!(
                                "invalid attribute name '{}' in tolerance (rtol, atol, ulps)",
                                other.unwrap_or("")
                            ),
                        ));
                    }
                }
                if !c.eat(b',') && c.peek() != Some(b'}') {
                    return Err(c.expected("',' or '}'"));
                }
            }
        }
        other => {
            return Err(c.error_at(
                name_pos,
                format!("invalid attribute name '{other}' in result_accuracy (mode or tolerance)"),
            ));
        }
    }
    c.expect(b'}')
}

/// Picks one of `options` by its spelling.
fn keyword<T: Copy>(
    c: &mut Cursor<'_>,
    what: &str,
    options: &[T],
    name: impl Fn(T) -> &'static str,
) -> Result<T> {
    let start = c.pos();
    let word = c.word().ok_or_else(|| c.expected(what))?;
    options
        .iter()
        .copied()
        .find(|o| name(*o) == word)
        .ok_or_else(|| {
            let names: Vec<&str> = options.iter().map(|o| name(*o)).collect();
            c.error_at(
                start,
                format!(
                    "unknown {what} '{word}'; expected one of {}",
                    names.join(", ")
                ),
            )
        })
}

/// `direction=EQ`.
pub(crate) fn direction(c: &mut Cursor<'_>) -> Result<ComparisonDirection> {
    keyword(
        c,
        "comparison direction",
        &ComparisonDirection::ALL,
        ComparisonDirection::name,
    )
}

/// `type=TOTALORDER`.
pub(crate) fn compare_type(c: &mut Cursor<'_>) -> Result<CompareType> {
    keyword(c, "comparison type", &CompareType::ALL, CompareType::name)
}

/// `kind=kLoop`.
pub(crate) fn fusion_kind(c: &mut Cursor<'_>) -> Result<FusionKind> {
    keyword(c, "fusion kind", &FusionKind::ALL, FusionKind::name)
}

/// `{default,highest}` (XLA also accepts upper case `DEFAULT`, as in `precision_config`).
pub(crate) fn precision_list(c: &mut Cursor<'_>) -> Result<Vec<Precision>> {
    c.expect(b'{')?;
    let mut out = Vec::new();
    if c.eat(b'}') {
        return Ok(out);
    }
    loop {
        let start = c.pos();
        let word = c.word().ok_or_else(|| c.expected("a precision"))?;
        let p = Precision::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(word))
            .ok_or_else(|| {
                c.error_at(
                    start,
                    format!("unknown precision '{word}'; expected default, high or highest"),
                )
            })?;
        out.push(p);
        if c.eat(b'}') {
            return Ok(out);
        }
        c.expect(b',')?;
    }
}

/// `{[0:4], [1:5:2]}`.
pub(crate) fn slices(c: &mut Cursor<'_>) -> Result<Vec<SliceDim>> {
    c.expect(b'{')?;
    let mut out = Vec::new();
    if c.eat(b'}') {
        return Ok(out);
    }
    loop {
        c.expect(b'[')?;
        let start = c.int()?;
        c.expect(b':')?;
        let limit = c.int()?;
        let stride = if c.eat(b':') { c.int()? } else { 1 };
        c.expect(b']')?;
        out.push(SliceDim {
            start,
            limit,
            stride,
        });
        if c.eat(b'}') {
            return Ok(out);
        }
        c.expect(b',')?;
    }
}

/// Reads the run of characters making up a `AxBxC` value.
fn x_separated<'a>(c: &mut Cursor<'a>) -> Result<(usize, Vec<&'a str>)> {
    c.skip_trivia();
    let start = c.pos();
    let word = c.word().ok_or_else(|| c.expected("a value like 3x3"))?;
    Ok((start, word.split('x').collect()))
}

fn parse_i64(c: &Cursor<'_>, pos: usize, text: &str) -> Result<i64> {
    text.parse::<i64>()
        .map_err(|_| c.error_at(pos, format!("expected an integer, found '{text}'")))
}

/// `padding=1_1x0_2_1`: low_high[_interior] per dimension.
pub(crate) fn padding(c: &mut Cursor<'_>) -> Result<Vec<PadDim>> {
    if c.peek() == Some(b'{') {
        // A rank-0 pad prints an empty configuration.
        c.expect(b'{')?;
        c.expect(b'}')?;
        return Ok(vec![]);
    }
    let (pos, parts) = x_separated(c)?;
    parts
        .iter()
        .map(|part| {
            let nums: Vec<&str> = part.split('_').collect();
            if nums.len() != 2 && nums.len() != 3 {
                return Err(c.error_at(
                    pos,
                    format!("padding '{part}' must be low_high or low_high_interior"),
                ));
            }
            Ok(PadDim {
                low: parse_i64(c, pos, nums[0])?,
                high: parse_i64(c, pos, nums[1])?,
                interior: nums.get(2).map_or(Ok(0), |n| parse_i64(c, pos, n))?,
            })
        })
        .collect()
}

/// `{size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=1x1 rhs_dilate=2x2 rhs_reversal=0x1}`.
pub(crate) fn window(c: &mut Cursor<'_>) -> Result<Window> {
    c.expect(b'{')?;
    let mut fields: Vec<(usize, &str, Vec<&str>)> = Vec::new();
    while !c.eat(b'}') {
        let pos = c.pos();
        let key = c
            .word()
            .ok_or_else(|| c.expected("a window field or '}'"))?;
        c.expect(b'=')?;
        let (_, parts) = x_separated(c)?;
        fields.push((pos, key, parts));
    }
    let rank = fields
        .iter()
        .find(|(_, k, _)| *k == "size")
        .map(|(_, _, p)| p.len())
        .unwrap_or(0);
    let mut dims = vec![WindowDim::of_size(1); rank];
    let mut have_size = false;
    for (pos, key, parts) in fields {
        if parts.len() != rank {
            return Err(c.error_at(
                pos,
                format!(
                    "window field '{key}' has {} entries but size has {rank}",
                    parts.len()
                ),
            ));
        }
        for (d, part) in dims.iter_mut().zip(&parts) {
            match key {
                "size" => d.size = parse_i64(c, pos, part)?,
                "stride" => d.stride = parse_i64(c, pos, part)?,
                "lhs_dilate" => d.base_dilation = parse_i64(c, pos, part)?,
                "rhs_dilate" => d.window_dilation = parse_i64(c, pos, part)?,
                "rhs_reversal" => d.window_reversal = parse_i64(c, pos, part)? != 0,
                "pad" => {
                    let (lo, hi) = part
                        .split_once('_')
                        .filter(|(_, hi)| !hi.contains('_'))
                        .ok_or_else(|| {
                            c.error_at(
                                pos,
                                format!(
                                    "window pad '{part}' expects padding_low and padding_high separated by '_' (no interior padding in a window)"
                                ),
                            )
                        })?;
                    d.pad_low = parse_i64(c, pos, lo)?;
                    d.pad_high = parse_i64(c, pos, hi)?;
                }
                other => {
                    return Err(c.error_at(
                        pos,
                        format!("unknown window field '{other}'; expected size, stride, pad, lhs_dilate, rhs_dilate or rhs_reversal"),
                    ));
                }
            }
        }
        have_size |= key == "size";
    }
    if !have_size && rank > 0 {
        return Err(c.expected("size= in the window"));
    }
    Ok(Window { dims })
}

/// `dim_labels=b01f_01io->b01f`.
/// XLA's checks of dim_labels before their meaning: labels unique within a part, every
/// part with the same number of spatial dimensions, spatial labels `0..n`.
fn check_dim_labels(parts: &[(&str, [char; 2])]) -> std::result::Result<(), String> {
    let spatial = |labels: &str| labels.chars().filter(char::is_ascii_digit).count();
    for &(labels, letters) in parts {
        let n = spatial(labels);
        let mut seen = Vec::new();
        for ch in labels.chars() {
            let valid = letters.contains(&ch)
                || ch == '?'
                || ch.to_digit(10).is_some_and(|d| (d as usize) < n);
            if !valid {
                return Err(format!(
                    "'{labels}' expects [0-{}{}{}?], found '{ch}'",
                    n.saturating_sub(1),
                    letters[0],
                    letters[1]
                ));
            }
            if ch != '?' && seen.contains(&ch) {
                return Err(format!(
                    "'{labels}' expects unique labels, '{ch}' appears twice"
                ));
            }
            seen.push(ch);
        }
    }
    let counts: Vec<usize> = parts.iter().map(|(l, _)| spatial(l)).collect();
    if counts.windows(2).any(|w| w[0] != w[1]) {
        return Err(format!(
            "input, kernel and output must have same number of spatial dimensions, found {counts:?}"
        ));
    }
    Ok(())
}

pub(crate) fn conv_dims(c: &mut Cursor<'_>) -> Result<ConvDims> {
    c.skip_trivia();
    let pos = c.pos();
    let (_, end) = c.raw_value()?;
    let text = c.slice(pos, end);
    let err = |msg: String| c.error_at(pos, format!("dim_labels '{text}': {msg}"));
    let (inputs, output) = text
        .split_once("->")
        .ok_or_else(|| err("expected INPUT_KERNEL->OUTPUT".into()))?;
    let (input, kernel) = inputs
        .split_once('_')
        .ok_or_else(|| err("expected INPUT_KERNEL->OUTPUT".into()))?;
    check_dim_labels(&[
        (input, ['b', 'f']),
        (kernel, ['i', 'o']),
        (output, ['b', 'f']),
    ])
    .map_err(&err)?;
    let spatial_rank = input.len().saturating_sub(2);
    let side =
        |labels: &str, a: char, b: char| -> std::result::Result<(i64, i64, Vec<i64>), String> {
            if labels.len() != spatial_rank + 2 {
                return Err(format!(
                    "'{labels}' has {} labels, expected {}",
                    labels.len(),
                    spatial_rank + 2
                ));
            }
            let (mut pa, mut pb) = (None, None);
            let mut spatial = vec![None; spatial_rank];
            for (i, ch) in labels.chars().enumerate() {
                let i = i as i64;
                let slot = if ch == a {
                    &mut pa
                } else if ch == b {
                    &mut pb
                } else {
                    match ch.to_digit(36).map(|d| d as usize) {
                        Some(d) if d < spatial_rank => &mut spatial[d],
                        _ => return Err(format!("unexpected label '{ch}' in '{labels}'")),
                    }
                };
                if slot.replace(i).is_some() {
                    return Err(format!("label '{ch}' appears twice in '{labels}'"));
                }
            }
            let missing = |ch: char| format!("'{labels}' has no '{ch}'");
            let spatial: Option<Vec<i64>> = spatial.into_iter().collect();
            Ok((
                pa.ok_or_else(|| missing(a))?,
                pb.ok_or_else(|| missing(b))?,
                spatial.ok_or_else(|| format!("'{labels}' lacks a spatial label"))?,
            ))
        };
    let (input_batch, input_feature, input_spatial) = side(input, 'b', 'f').map_err(&err)?;
    let (kernel_input_feature, kernel_output_feature, kernel_spatial) =
        side(kernel, 'i', 'o').map_err(&err)?;
    let (output_batch, output_feature, output_spatial) = side(output, 'b', 'f').map_err(&err)?;
    Ok(ConvDims {
        input_batch,
        input_feature,
        input_spatial,
        kernel_input_feature,
        kernel_output_feature,
        kernel_spatial,
        output_batch,
        output_feature,
        output_spatial,
    })
}

/// `sharding={...}` in every form XLA prints.
pub(crate) fn sharding(c: &mut Cursor<'_>) -> Result<Sharding> {
    sharding_nested(c, 0)
}

fn sharding_nested(c: &mut Cursor<'_>, depth: usize) -> Result<Sharding> {
    let open = c.pos();
    if depth >= MAX_NESTING {
        return Err(c.error_at(open, "sharding nested too deeply"));
    }
    c.expect(b'{')?;
    if c.peek() == Some(b'{') || c.peek() == Some(b'}') {
        let mut elems = Vec::new();
        while !c.eat(b'}') {
            elems.push(sharding_nested(c, depth + 1)?);
            if !c.eat(b',') && c.peek() != Some(b'}') {
                return Err(c.expected("',' or '}' in a tuple sharding"));
            }
        }
        return Ok(Sharding::Tuple(elems));
    }
    let start = c.pos();
    let result = match c.word() {
        Some("replicated") => Sharding::Replicated,
        Some("manual") => Sharding::Manual,
        Some("unknown") => Sharding::Unknown,
        Some("maximal") => {
            if !c.eat_keyword("device") {
                return Err(c.expected("device=N after maximal"));
            }
            c.expect(b'=')?;
            Sharding::Maximal { device: c.int()? }
        }
        Some("devices") => {
            c.expect(b'=')?;
            c.expect(b'[')?;
            let mut tile_dims = Vec::new();
            loop {
                tile_dims.push(c.int()?);
                if c.eat(b']') {
                    break;
                }
                c.expect(b',')?;
            }
            let devices = if c.eat_str("<=") {
                let start = c.pos();
                c.expect(b'[')?;
                let mut reshape = Vec::new();
                loop {
                    reshape.push(c.int()?);
                    if c.eat(b']') {
                        break;
                    }
                    c.expect(b',')?;
                }
                let mut transpose = Vec::new();
                if c.peek_raw() == Some(b'T') {
                    c.expect(b'T')?;
                    c.expect(b'(')?;
                    loop {
                        transpose.push(c.int()?);
                        if c.eat(b')') {
                            break;
                        }
                        c.expect(b',')?;
                    }
                }
                check_iota(c, start, &reshape, &transpose)?;
                TileDevices::Iota { reshape, transpose }
            } else {
                let mut list = vec![c.int()?];
                while c.eat(b',') {
                    list.push(c.int()?);
                }
                TileDevices::List(list)
            };
            let mut last_tile_dim_replicate = false;
            let mut last_tile_dims = Vec::new();
            loop {
                if c.eat_keyword("last_tile_dim_replicate") {
                    last_tile_dim_replicate = true;
                } else if c.eat_keyword("last_tile_dims") {
                    c.expect(b'=')?;
                    c.expect(b'{')?;
                    while !c.eat(b'}') {
                        let w = c.word().ok_or_else(|| c.expected("a subgroup type"))?;
                        last_tile_dims.push(w.to_string());
                        c.eat(b',');
                    }
                } else {
                    break;
                }
            }
            Sharding::Tiled {
                tile_dims,
                devices,
                last_tile_dim_replicate,
                last_tile_dims,
            }
        }
        _ => {
            return Err(c.error_at(
                start,
                "expected a sharding: replicated, manual, unknown, maximal device=N, devices=[..].. or a tuple {{..}, ..}",
            ));
        }
    };
    if !c.eat(b'}') {
        return Err(c.expected("'}' closing the sharding"));
    }
    Ok(result)
}

/// `metadata={op_type="..." op_name="..." source_line=3 stack_frame_id=1}`.
pub(crate) fn metadata(c: &mut Cursor<'_>) -> Result<Metadata> {
    c.expect(b'{')?;
    let mut m = Metadata::default();
    while !c.eat(b'}') {
        // XLA separates fields with spaces, and accepts commas.
        c.eat(b',');
        c.skip_trivia();
        let key_pos = c.pos();
        let key = c
            .word()
            .ok_or_else(|| c.expected("a metadata field or '}'"))?;
        c.expect(b'=')?;
        match key {
            "op_type" => m.op_type = Some(c.string()?),
            "op_name" => m.op_name = Some(c.string()?),
            "source_file" => m.source_file = Some(c.string()?),
            "deduplicated_name" => m.deduplicated_name = Some(c.string()?),
            "scheduling_name" => m.scheduling_name = Some(c.string()?),
            "source_line" => m.source_line = Some(c.int()?),
            "source_end_line" => m.source_end_line = Some(c.int()?),
            "source_column" => m.source_column = Some(c.int()?),
            "source_end_column" => m.source_end_column = Some(c.int()?),
            "stack_frame_id" => m.stack_frame_id = Some(c.int()?),
            other => {
                // Kept verbatim: `raw_value` refuses runs that would not read back the
                // same (an open bracket, a quote inside).
                let (s, e) = c.raw_value()?;
                if s == e {
                    return Err(
                        c.error_at(key_pos, format!("metadata field '{other}' has no value"))
                    );
                }
                m.other.push((other.to_string(), c.slice(s, e).to_string()));
            }
        }
    }
    Ok(m)
}

/// `frontend_attributes={key="value",key2="value2"}`.
pub(crate) fn frontend_attributes(c: &mut Cursor<'_>) -> Result<FrontendAttributes> {
    c.expect(b'{')?;
    let mut attrs = FrontendAttributes::new();
    while !c.eat(b'}') {
        let key = c
            .word()
            .ok_or_else(|| c.expected("an attribute name or '}'"))?;
        c.expect(b'=')?;
        let value = if c.peek() == Some(b'"') {
            c.string()?
        } else {
            let (s, e) = c.raw_value()?;
            c.slice(s, e).to_string()
        };
        attrs.insert(key.to_string(), value);
        if !c.eat(b',') && c.peek() != Some(b'}') {
            return Err(c.expected("',' or '}'"));
        }
    }
    Ok(attrs)
}

/// `{file_name_id=1 function_name_id=1 line=8 end_line=8 column=9 end_column=16}`.
pub(crate) fn file_location(c: &mut Cursor<'_>) -> Result<FileLocation> {
    let mut loc = FileLocation::default();
    key_values(c, |c, key, pos| {
        let v = c.int()?;
        match key {
            "file_name_id" => loc.file_name_id = v,
            "function_name_id" => loc.function_name_id = v,
            "line" => loc.line = v,
            "end_line" => loc.end_line = v,
            "column" => loc.column = v,
            "end_column" => loc.end_column = v,
            other => return Err(c.error_at(pos, format!("unknown FileLocations field '{other}'"))),
        }
        Ok(())
    })?;
    Ok(loc)
}

/// `{file_location_id=1 parent_frame_id=1}`.
pub(crate) fn stack_frame(c: &mut Cursor<'_>) -> Result<StackFrame> {
    let mut frame = StackFrame::default();
    key_values(c, |c, key, pos| {
        let v = c.int()?;
        match key {
            "file_location_id" => frame.file_location_id = v,
            "parent_frame_id" => frame.parent_frame_id = v,
            other => return Err(c.error_at(pos, format!("unknown StackFrames field '{other}'"))),
        }
        Ok(())
    })?;
    Ok(frame)
}

fn key_values<'a>(
    c: &mut Cursor<'a>,
    mut field: impl FnMut(&mut Cursor<'a>, &str, usize) -> Result<()>,
) -> Result<()> {
    c.expect(b'{')?;
    while !c.eat(b'}') {
        let pos = c.pos();
        let key = c.word().ok_or_else(|| c.expected("a field name or '}'"))?;
        c.expect(b'=')?;
        field(c, key, pos)?;
    }
    Ok(())
}
