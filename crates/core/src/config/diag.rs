//! Diagnostics for configuration files: every problem a user can cause is reported as
//! `FILE:LINE:COL: message` plus a hint, and validation collects all of them instead of
//! stopping at the first (owners fix a file once, not once per error).

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One problem in one file, with its position already resolved to line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub col: usize,
    pub message: String,
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line,
            self.col,
            self.message
        )?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// Collects diagnostics for one source text. Positions are byte ranges into that text and are
/// resolved to line:col when the diagnostic is recorded.
#[derive(Debug)]
pub struct Diagnostics {
    file: PathBuf,
    src: String,
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn new(file: &Path, src: &str) -> Self {
        Diagnostics {
            file: file.to_path_buf(),
            src: src.to_string(),
            items: Vec::new(),
        }
    }

    /// Records an error at `span` (a byte range into the source).
    pub fn error(
        &mut self,
        span: Range<usize>,
        message: impl fmt::Display,
        hint: impl Into<String>,
    ) {
        let (line, col) = line_col(&self.src, span.start);
        let hint = hint.into();
        self.items.push(Diagnostic {
            file: self.file.clone(),
            line,
            col,
            message: message.to_string(),
            hint: (!hint.is_empty()).then_some(hint),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The diagnostics in file order, whatever order the checks ran in.
    pub fn into_vec(mut self) -> Vec<Diagnostic> {
        self.items.sort_by_key(|d| (d.line, d.col));
        self.items
    }

    /// Converts a toml syntax or type error (serde stops at the first) into a diagnostic.
    pub fn toml_error(&mut self, err: &toml::de::Error, hint: impl Into<String>) {
        let span = err.span().unwrap_or(0..0);
        // toml's message already names the key and the expected type; keep only its first line
        // (the rest is a snippet we do not need twice).
        let message = err
            .message()
            .lines()
            .next()
            .unwrap_or("invalid TOML")
            .to_string();
        self.error(span, message, hint);
    }
}

/// 1-based line and character column of a byte offset. Offsets past the end (or inside a
/// multi-byte character) are clamped, never a panic.
pub fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(src.len());
    while !src.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &src[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = before[line_start..].chars().count() + 1;
    (line, col)
}

/// Renders a list of diagnostics, one per paragraph, for the terminal.
pub(crate) fn render(items: &[Diagnostic]) -> String {
    items.iter().map(|d| format!("{d}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_lines_and_characters() {
        let src = "a = 1\nbé = \"x\"\n";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 6), (2, 1));
        // "é" is two bytes but one column.
        assert_eq!(line_col(src, src.find('=').unwrap()), (1, 3));
        let second_eq = src.rfind('=').unwrap();
        assert_eq!(line_col(src, second_eq), (2, 4));
        assert_eq!(line_col(src, 10_000), (3, 1));
    }

    #[test]
    fn display_is_file_line_col_message_and_hint() {
        let mut d = Diagnostics::new(Path::new("p.toml"), "x = 1\ny = 2\n");
        d.error(6..7, "bad y", "set y to 1");
        let v = d.into_vec();
        assert_eq!(v[0].to_string(), "p.toml:2:1: bad y\n  hint: set y to 1");
    }
}
