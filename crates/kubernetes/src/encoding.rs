//! The NRP provisioner's encoding of lists and dicts inside one string: entries separated by
//! `,`, key and value by `:`, then `&colon;` `&comma;` `&amp;` decoded in that order, each
//! until it no longer occurs. Its INI
//! file is written this way, and so is a job's `RequestLabels`, so the importer and the Job
//! bodies read both with these functions.

/// A dict entry that is not `KEY:VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{entry}` must be KEY:VALUE with exactly one `:` (found {colons})")]
pub struct EntryError {
    pub entry: String,
    pub colons: usize,
}

/// Decodes one list or dict element as the provisioner does: `&colon;` until none is left,
/// then `&comma;` until none is left, then `&amp;` until none is left (so `&amp;amp;` is `&`,
/// while an `&colon;` that only appears once `&amp;` is decoded stays as it is).
pub(crate) fn decode(s: &str) -> String {
    let mut out = s.to_string();
    for (entity, c) in [("&colon;", ":"), ("&comma;", ","), ("&amp;", "&")] {
        while out.contains(entity) {
            out = out.replace(entity, c);
        }
    }
    out
}

/// `parse_list`: split on `,`, decode each element. Empty input is an empty list.
pub(crate) fn parse_list(s: &str) -> Vec<String> {
    if s.trim().is_empty() {
        return Vec::new();
    }
    s.split(',').map(|e| decode(e.trim())).collect()
}

/// `parse_dict`: split on `,`, each element on `:` (exactly one), decode key and value.
/// Returns the pairs in file order; the error names the bad element.
pub(crate) fn parse_dict(s: &str) -> Result<Vec<(String, String)>, EntryError> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|e| {
            let parts: Vec<&str> = e.split(':').collect();
            if parts.len() != 2 {
                return Err(EntryError {
                    entry: e.to_string(),
                    colons: parts.len() - 1,
                });
            }
            Ok((decode(parts[0].trim()), decode(parts[1].trim())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_order_is_colon_comma_amp() {
        assert_eq!(decode("a&colon;b&comma;c&amp;d"), "a:b,c&d");
        // `&amp;colon;` must come out as the literal text `&colon;`, not `:`.
        assert_eq!(decode("&amp;colon;"), "&colon;");
        // Each entity is decoded until it no longer occurs, as upstream loops.
        assert_eq!(decode("a&amp;amp;b"), "a&b");
        assert_eq!(decode("&amp;amp;amp;"), "&");
        assert_eq!(
            decode("&colon&colon;;"),
            "&colon:;",
            "one pass makes no new entity"
        );
        assert_eq!(
            parse_dict("a:1,b:x&colon;y").unwrap(),
            vec![("a".into(), "1".into()), ("b".into(), "x:y".into())]
        );
        assert!(
            parse_dict("a:1:2")
                .unwrap_err()
                .to_string()
                .contains("exactly one")
        );
        assert!(parse_dict("novalue").is_err());
        assert_eq!(parse_list("a,b&comma;c"), vec!["a", "b,c"]);
    }
}
