//! The `[worker.env]` template language. A value is text with placeholders in braces
//! (`{cpus}`, `{die_at}`, …) that pilotd fills in from the decision when it starts a worker;
//! `{{` and `}}` are literal braces. pilotd.toml is checked against it when loaded, the pool's
//! manifest when fetched, and the plan renders it: one grammar for all three.

use std::collections::BTreeMap;

/// Placeholders a `[worker.env]` value may use.
pub(crate) const PLACEHOLDERS: &[&str] = &[
    "cpus",
    "memory_mib",
    "disk_kib",
    "gpus",
    "idle_minutes",
    "idle_seconds",
    "accept_until",
    "accept_until_unix",
    "die_at",
    "die_at_unix",
    "hours_left",
    "accept_hours",
    "retire_hours",
    "worker_name",
    "instance",
    "token_path",
    "scratch_path",
    "free_hours",
    "ad_file",
];

/// Why a template is invalid; `offset` is the byte offset of the problem in the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unknown placeholder `{{{name}}}`")]
    Unknown { offset: usize, name: String },
    #[error("`{{` is not closed by `}}`")]
    Unclosed { offset: usize },
    #[error("a lone `}}`")]
    StrayClose { offset: usize },
}

impl TemplateError {
    /// Byte offset of the problem in the template.
    pub(crate) fn offset(&self) -> usize {
        match self {
            TemplateError::Unknown { offset, .. }
            | TemplateError::Unclosed { offset }
            | TemplateError::StrayClose { offset } => *offset,
        }
    }
}

/// One piece of a parsed template.
enum Piece<'a> {
    Text(&'a str),
    Placeholder(&'a str),
}

fn parse(s: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut out = Vec::new();
    let bytes = s.as_bytes();
    let (mut i, mut text_start) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'{' if bytes.get(i + 1) == Some(&b'{') => {
                out.push(Piece::Text(&s[text_start..=i]));
                i += 2;
                text_start = i;
            }
            b'}' if bytes.get(i + 1) == Some(&b'}') => {
                out.push(Piece::Text(&s[text_start..=i]));
                i += 2;
                text_start = i;
            }
            b'{' => {
                let close = s[i..]
                    .find('}')
                    .ok_or(TemplateError::Unclosed { offset: i })?;
                let name = &s[i + 1..i + close];
                if !PLACEHOLDERS.contains(&name) {
                    return Err(TemplateError::Unknown {
                        offset: i,
                        name: name.to_string(),
                    });
                }
                out.push(Piece::Text(&s[text_start..i]));
                out.push(Piece::Placeholder(name));
                i += close + 1;
                text_start = i;
            }
            b'}' => return Err(TemplateError::StrayClose { offset: i }),
            _ => i += 1,
        }
    }
    out.push(Piece::Text(&s[text_start..]));
    Ok(out)
}

/// Checks a value before it is accepted (pilotd.toml at load time, a manifest when fetched).
pub fn check(s: &str) -> Result<(), TemplateError> {
    parse(s).map(|_| ())
}

/// Renders a template; values come from `values` (every known placeholder is there). A
/// template that does not parse (it was checked when accepted) is passed through verbatim.
pub fn render(template: &str, values: &BTreeMap<&'static str, String>) -> String {
    let Ok(pieces) = parse(template) else {
        return template.to_string();
    };
    pieces
        .into_iter()
        .map(|p| match p {
            Piece::Text(t) => t.to_string(),
            Piece::Placeholder(n) => values.get(n).cloned().unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_checked_with_positions() {
        assert_eq!(check("{cpus} CPUs, {{literal}}"), Ok(()));
        assert_eq!(check("plain"), Ok(()));
        let e = check("x {cpu}").unwrap_err();
        assert_eq!(e.offset(), 2);
        assert!(e.to_string().contains("unknown placeholder `{cpu}`"), "{e}");
        assert_eq!(check("ab {cpus").unwrap_err().offset(), 3);
        assert_eq!(check("a}b").unwrap_err().offset(), 1);
        assert_eq!(check("é{nope}").unwrap_err().offset(), 2, "byte offsets");
    }

    #[test]
    fn rendering_fills_placeholders_and_keeps_literal_braces() {
        let values = BTreeMap::from([("cpus", "4".to_string())]);
        assert_eq!(render("{cpus} CPUs, {{cpus}}", &values), "4 CPUs, {cpus}");
        assert_eq!(
            render("{gpus}", &values),
            "",
            "a known placeholder without a value"
        );
        assert_eq!(
            render("{nope", &values),
            "{nope",
            "unchecked text passes through"
        );
    }
}
