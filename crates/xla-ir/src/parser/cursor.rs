//! A hand-written, context-driven lexer over HLO text.
//!
//! HLO's lexical forms depend on where they appear (`3x3`, `1_1x0_2`, `b01f_01io->b01f`,
//! names with `.` and `-`), so the parser asks the cursor for what it expects next instead
//! of tokenising the file up front. Nothing is allocated per token, which keeps a 50 MB
//! constant linear in time and memory.

use super::ParseError;

/// Byte offsets of line starts, for turning positions into line:column.
pub(crate) struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    pub(crate) fn new(text: &str) -> LineIndex {
        // Lines end at `\n`, `\r\n` or a lone `\r` (old Mac text).
        let bytes = text.as_bytes();
        let mut starts = vec![0];
        starts.extend(
            bytes
                .iter()
                .enumerate()
                .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && bytes.get(i + 1) != Some(&b'\n')))
                .map(|(i, _)| i + 1),
        );
        LineIndex { starts }
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub(crate) fn line_col(&self, text: &str, pos: usize) -> (u32, u32) {
        let pos = pos.min(text.len());
        let line = self.starts.partition_point(|&s| s <= pos) - 1;
        let start = self.starts[line];
        let column = text
            .get(start..pos)
            .map_or(pos - start, |s| s.chars().count());
        (line as u32 + 1, column as u32 + 1)
    }
}

/// A position in HLO text with the operations the parser needs.
#[derive(Clone)]
pub(crate) struct Cursor<'a> {
    text: &'a str,
    lines: &'a LineIndex,
    pos: usize,
    end: usize,
    /// Where a `/*` that is never closed starts, once trivia skipping has met one.
    unterminated_comment: Option<usize>,
    /// Where the last attribute value spread over several lines opened, for errors at the
    /// end of the text (a bracket left open takes the rest of the computation with it).
    multiline_value: Option<usize>,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(text: &'a str, lines: &'a LineIndex) -> Cursor<'a> {
        Cursor {
            text,
            lines,
            pos: 0,
            end: text.len(),
            unterminated_comment: None,
            multiline_value: None,
        }
    }

    /// A cursor over `start..end` of the same text (errors keep file positions).
    pub(crate) fn sub(&self, start: usize, end: usize) -> Cursor<'a> {
        Cursor {
            text: self.text,
            lines: self.lines,
            pos: start,
            end,
            unterminated_comment: None,
            multiline_value: None,
        }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn slice(&self, start: usize, end: usize) -> &'a str {
        &self.text[start..end]
    }

    pub(crate) fn line_col(&self, pos: usize) -> (u32, u32) {
        self.lines.line_col(self.text, pos)
    }

    pub(crate) fn error_at(&self, pos: usize, message: impl Into<String>) -> ParseError {
        let (line, column) = self.line_col(pos);
        ParseError {
            line,
            column,
            message: message.into(),
        }
    }

    /// An error at the next token, saying what was expected and what was found.
    pub(crate) fn expected(&mut self, what: &str) -> ParseError {
        self.skip_trivia();
        let found = self.describe_next();
        self.error_at(self.pos, format!("expected {what}, found {found}"))
    }

    fn describe_next(&self) -> String {
        if self.pos >= self.end {
            return match self.unterminated_comment {
                Some(open) => {
                    let (line, column) = self.line_col(open);
                    format!(
                        "end of input inside the comment opened at {line}:{column} ('/*' without '*/')"
                    )
                }
                None => match self.multiline_value {
                    Some(open) => {
                        let (line, column) = self.line_col(open);
                        format!(
                            "end of input (an unbalanced '{{' opened at {line}:{column} may have taken the rest)"
                        )
                    }
                    None => "end of input".to_string(),
                },
            };
        }
        let rest = &self.text[self.pos..self.end];
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii() && is_word_byte(*c as u8))
            .take(40)
            .collect();
        if word.is_empty() {
            format!("'{}'", rest.chars().next().unwrap_or(' '))
        } else {
            format!("'{word}'")
        }
    }

    /// Skips whitespace, `/* ... */` comments (XLA prints `/*index=5*/`) and `// ...`
    /// comments to the end of the line (XLA's lexer takes both).
    pub(crate) fn skip_trivia(&mut self) {
        let bytes = self.text.as_bytes();
        loop {
            while self.pos < self.end && bytes[self.pos].is_ascii_whitespace() {
                self.pos += 1;
            }
            if self.pos + 1 < self.end && bytes[self.pos] == b'/' && bytes[self.pos + 1] == b'/' {
                // A `//` comment ends at the line end: `\n`, `\r\n` or a lone `\r`.
                match self.text[self.pos..self.end].find(['\n', '\r']) {
                    Some(offset) => self.pos += offset + 1,
                    None => self.pos = self.end,
                }
                continue;
            }
            if self.pos + 1 < self.end && bytes[self.pos] == b'/' && bytes[self.pos + 1] == b'*' {
                match self.text[self.pos + 2..self.end].find("*/") {
                    Some(offset) => self.pos += 2 + offset + 2,
                    // An unterminated comment runs to the end; the caller then reports
                    // "expected ..., found end of input".
                    None => {
                        self.unterminated_comment = Some(self.pos);
                        self.pos = self.end;
                    }
                }
            } else {
                return;
            }
        }
    }

    pub(crate) fn at_end(&mut self) -> bool {
        self.skip_trivia();
        self.pos >= self.end
    }

    /// The next byte after trivia, without consuming it.
    pub(crate) fn peek(&mut self) -> Option<u8> {
        self.skip_trivia();
        self.peek_raw()
    }

    /// The next byte, without skipping trivia.
    pub(crate) fn peek_raw(&self) -> Option<u8> {
        (self.pos < self.end).then(|| self.text.as_bytes()[self.pos])
    }

    /// Consumes `c` if it is next.
    pub(crate) fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Consumes `s` if it is next (after trivia).
    pub(crate) fn eat_str(&mut self, s: &str) -> bool {
        self.skip_trivia();
        if self.text[self.pos..self.end].starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    pub(crate) fn expect(&mut self, c: u8) -> Result<(), ParseError> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.expected(&format!("'{}'", c as char)))
        }
    }

    /// Consumes a word made of letters, digits, `_`, `.` and `-`.
    pub(crate) fn word(&mut self) -> Option<&'a str> {
        self.skip_trivia();
        let bytes = self.text.as_bytes();
        let start = self.pos;
        while self.pos < self.end && is_word_byte(bytes[self.pos]) {
            self.pos += 1;
        }
        (self.pos > start).then(|| &self.text[start..self.pos])
    }

    /// Peeks at the next word without consuming it.
    pub(crate) fn peek_word(&mut self) -> Option<&'a str> {
        let mut probe = self.clone();
        probe.word()
    }

    /// Consumes `keyword` if the next word is exactly it.
    pub(crate) fn eat_keyword(&mut self, keyword: &str) -> bool {
        let mut probe = self.clone();
        if probe.word() == Some(keyword) {
            *self = probe;
            true
        } else {
            false
        }
    }

    /// A name, with or without a leading `%`.
    pub(crate) fn name(&mut self, what: &str) -> Result<&'a str, ParseError> {
        self.skip_trivia();
        let mut probe = self.clone();
        if probe.peek_raw() == Some(b'%') {
            probe.pos += 1;
        }
        match probe.peek_raw() {
            Some(b) if is_word_byte(b) => {
                *self = probe;
                Ok(self.word().expect("a word byte is next"))
            }
            _ => Err(self.expected(what)),
        }
    }

    /// A decimal integer, optionally negative.
    pub(crate) fn int(&mut self) -> Result<i64, ParseError> {
        self.skip_trivia();
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let mut p = self.pos;
        if p < self.end && (bytes[p] == b'-' || bytes[p] == b'+') {
            p += 1;
        }
        let digits = p;
        while p < self.end && bytes[p].is_ascii_digit() {
            p += 1;
        }
        if p == digits {
            return Err(self.expected("an integer"));
        }
        let text = &self.text[start..p];
        let value = text
            .parse::<i64>()
            .map_err(|_| self.error_at(start, format!("integer {text} is out of range")))?;
        self.pos = p;
        Ok(value)
    }

    /// A double-quoted string with C escapes; returns the unescaped text.
    pub(crate) fn string(&mut self) -> Result<String, ParseError> {
        self.skip_trivia();
        let start = self.pos;
        if self.peek_raw() != Some(b'"') {
            return Err(self.expected("a quoted string"));
        }
        self.pos += 1;
        let mut out = String::new();
        let mut chars = self.text[self.pos..self.end].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, 't')) => out.push('\t'),
                    Some((_, 'r')) => out.push('\r'),
                    Some((_, other)) => out.push(other),
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(self.error_at(start, "unterminated string"))
    }

    /// Skips a string without unescaping it; returns false if unterminated.
    fn skip_string_raw(&mut self) -> bool {
        let bytes = self.text.as_bytes();
        self.pos += 1;
        while self.pos < self.end {
            match bytes[self.pos] {
                b'\\' => self.pos += 2,
                b'"' => {
                    self.pos += 1;
                    return true;
                }
                _ => self.pos += 1,
            }
        }
        false
    }

    /// Moves past a run of characters up to whitespace, `,`, `}` or `)`, taking in any
    /// balanced groups inside it (a shape: `f32[4]{0}`; an iota: `[2,2]<=[4]`).
    /// The rest of a value's run: up to whitespace, or `,`, `}`, `)` outside brackets. A run
    /// that leaves a bracket open or holds a quote is an error: kept verbatim, it would
    /// not read back the same (found by fuzzing).
    fn rest_of_run(&mut self, start: usize) -> Result<(), ParseError> {
        let bytes = self.text.as_bytes();
        let mut depth = 0usize;
        let run = self.pos;
        while self.pos < self.end && !bytes[self.pos].is_ascii_whitespace() {
            match bytes[self.pos] {
                b'{' | b'[' | b'(' => depth += 1,
                b'}' | b']' | b')' if depth > 0 => depth -= 1,
                b',' | b'}' | b')' if depth == 0 => break,
                b'"' => {
                    return Err(self.error_at(
                        self.pos,
                        "a quote inside an attribute value (a string must be the whole value)",
                    ));
                }
                _ => {}
            }
            self.pos += 1;
        }
        if depth > 0 {
            let text = &self.text[start.min(run)..self.pos];
            return Err(self.error_at(
                start,
                format!("unbalanced brackets in the attribute value '{text}'"),
            ));
        }
        Ok(())
    }

    /// The byte range of one parenthesised group `(..)` starting here (nested brackets
    /// allowed), on one line and holding no quote: a layout item's value, kept verbatim.
    pub(crate) fn paren_group(&mut self) -> Result<(usize, usize), ParseError> {
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let mut depth = 0usize;
        while self.pos < self.end {
            let b = bytes[self.pos];
            match b {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => {
                    if depth == 0 {
                        break;
                    }
                    depth -= 1;
                }
                b'"' | b'\n' | b'\r' => break,
                _ => {}
            }
            self.pos += 1;
            if depth == 0 {
                return Ok((start, self.pos));
            }
        }
        Err(self.error_at(
            start,
            "expected a layout item's value: one parenthesised group on one line",
        ))
    }

    /// The byte range of one attribute value: a quoted string, a balanced `{..}`/`[..]`/`(..)`
    /// group, or a run of characters (with any balanced groups in it) up to whitespace, `,`,
    /// `}` or `)`.
    pub(crate) fn raw_value(&mut self) -> Result<(usize, usize), ParseError> {
        self.skip_trivia();
        let start = self.pos;

        match self.peek_raw() {
            Some(b'"') => {
                if !self.skip_string_raw() {
                    return Err(self.error_at(start, "unterminated string"));
                }
            }
            Some(b'{' | b'[' | b'(') => {
                let mut stack: Vec<u8> = Vec::new();
                loop {
                    // XLA's printer keeps a value on one line, but hand-written modules
                    // (and `origin_recovery_table`) spread groups over lines.
                    let b = match self.peek_raw() {
                        None => {
                            let open = stack.last().copied().unwrap_or(b'{');
                            return Err(self.error_at(
                                start,
                                format!("unbalanced '{}': never closed", open as char),
                            ));
                        }
                        Some(b) => b,
                    };
                    match b {
                        b'"' => {
                            if !self.skip_string_raw() {
                                return Err(self.error_at(start, "unterminated string"));
                            }
                            continue;
                        }
                        b'\n' => self.multiline_value = Some(start),
                        b'{' | b'[' | b'(' => stack.push(b),
                        b'}' | b']' | b')' => {
                            let open = stack.pop().unwrap_or(b'{');
                            let expected = match open {
                                b'{' => b'}',
                                b'[' => b']',
                                _ => b')',
                            };
                            if b != expected {
                                return Err(self.error_at(
                                    self.pos,
                                    format!(
                                        "expected '{}' to close '{}', found '{}'",
                                        expected as char, open as char, b as char
                                    ),
                                ));
                            }
                        }
                        _ => {}
                    }
                    self.pos += 1;
                    if stack.is_empty() {
                        break;
                    }
                }
                // A group may be followed by more of the value (`[2,2]<=[4]`).
                self.rest_of_run(start)?;
            }
            _ => {
                self.rest_of_run(start)?;
                if self.pos == start {
                    return Err(self.expected("an attribute value"));
                }
            }
        }
        Ok((start, self.pos))
    }

    /// A run of characters that can make up a literal element (`-1.5e-05`, `nan`, `-inf`,
    /// `nan(0x7fc00001)`, `true`).
    pub(crate) fn number_token(&mut self) -> Result<(usize, &'a str), ParseError> {
        self.skip_trivia();
        let start = self.pos;
        let bytes = self.text.as_bytes();
        while self.pos < self.end
            && (bytes[self.pos].is_ascii_alphanumeric()
                || matches!(bytes[self.pos], b'.' | b'-' | b'+'))
        {
            self.pos += 1;
        }
        if self.pos < self.end
            && bytes[self.pos] == b'('
            && self.text[start..self.pos].ends_with("nan")
        {
            while self.pos < self.end && bytes[self.pos] != b')' {
                self.pos += 1;
            }
            self.pos = (self.pos + 1).min(self.end);
        }
        if self.pos == start {
            return Err(self.expected("a number"));
        }
        Ok((start, &self.text[start..self.pos]))
    }

    /// Requires that nothing but trivia remains.
    pub(crate) fn expect_end(&mut self, what: &str) -> Result<(), ParseError> {
        if self.at_end() {
            Ok(())
        } else {
            let found = self.describe_next();
            Err(self.error_at(self.pos, format!("unexpected {found} after {what}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column() {
        let text = "ab\ncdé f\n";
        let lines = LineIndex::new(text);
        assert_eq!(lines.line_col(text, 0), (1, 1));
        assert_eq!(lines.line_col(text, 3), (2, 1));
        assert_eq!(lines.line_col(text, text.find('f').unwrap()), (2, 5));
    }

    #[test]
    fn raw_values() {
        let text = r#"{a={1,2}, "x,}"} NE, b01f_01io->b01f"#;
        let lines = LineIndex::new(text);
        let mut c = Cursor::new(text, &lines);
        let (s, e) = c.raw_value().unwrap();
        assert_eq!(&text[s..e], r#"{a={1,2}, "x,}"}"#);
        let (s, e) = c.raw_value().unwrap();
        assert_eq!(&text[s..e], "NE");
        assert!(c.eat(b','));
        let (s, e) = c.raw_value().unwrap();
        assert_eq!(&text[s..e], "b01f_01io->b01f");
    }

    #[test]
    fn comments_are_trivia() {
        let text = "/*index=5*/ %name.1-x";
        let lines = LineIndex::new(text);
        let mut c = Cursor::new(text, &lines);
        assert_eq!(c.name("a name").unwrap(), "name.1-x");
        assert!(c.at_end());
    }

    #[test]
    fn line_comments_run_to_the_end_of_the_line() {
        let text = "// a comment\n  %a // another\n%b //";
        let lines = LineIndex::new(text);
        let mut c = Cursor::new(text, &lines);
        assert_eq!(c.name("a name").unwrap(), "a");
        assert_eq!(c.name("a name").unwrap(), "b");
        assert!(c.at_end());
        let module = "HloModule m\n\n// the entry\nENTRY main {\n  x = f32[] parameter(0) // in\n  ROOT y = f32[] negate(x)\n}\n";
        let m = crate::parse_module(module).unwrap();
        assert_eq!(m.entry_computation().len(), 2);
    }
}
