//! The slot-ad attributes pilotd hands the pilot (`PILOT_AD_FILE`): one `NAME = value` per
//! line, validated before any of it reaches condor.
//!
//! pilotd writes the file into a directory mounted read-only into the worker and replaces it
//! by rename, so a reader sees either the old or the new file. It still is input from outside
//! the pilot, and what passes here ends up in the slot ad (through the startd cron job) and in
//! condor's configuration (the initial values in 99-pilot.conf), so it is held to a whitelist
//! instead of being passed through: a line that could set `START`, add a configuration line or
//! expand a configuration macro must never get in.
//!
//! - names match `^PILOTD_[A-Za-z0-9_]+$` (at most [`MAX_NAME`] characters);
//! - a value is one ClassAd literal: an integer, a real, `True`/`False` (any case, written
//!   back as `True`/`False`), `undefined`, or a double-quoted string whose only escapes are `\"` and `\\`
//!   and which holds no control character and no `$` (condor expands `$(...)` in
//!   configuration values);
//! - blank lines and lines starting with `#` are skipped; anything else is dropped with a note
//!   naming its line;
//! - at most [`MAX_FILE_BYTES`] are read (a larger file is refused whole, since cutting it
//!   could cut a line), at most [`MAX_LINE`] characters per line and [`MAX_ATTRS`] attributes.
//!
//! Parsing is pure; [`read`] is the one function that touches the file.

use std::io::Read;
use std::path::Path;

pub const MAX_FILE_BYTES: u64 = 64 * 1024;
pub const MAX_LINE: usize = 1024;
pub const MAX_NAME: usize = 100;
pub const MAX_ATTRS: usize = 100;

/// The prefix every attribute pilotd may set carries.
pub const PREFIX: &str = "PILOTD_";

/// The attributes that passed, in file order (a later line for the same name replaces the
/// earlier one, as in a ClassAd), and one note per line that did not.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdFile {
    pub attrs: Vec<(String, String)>,
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AdFileError {
    #[error("ad file {path}: cannot read it: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("ad file {path} is larger than {MAX_FILE_BYTES} bytes; nothing of it is used")]
    TooLarge { path: String },
}

/// Whether `name` is an attribute pilotd may set.
pub fn valid_name(name: &str) -> bool {
    name.len() <= MAX_NAME
        && name.strip_prefix(PREFIX).is_some_and(|rest| {
            !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

/// The value as it is written back (booleans normalised), when it is one allowed literal.
pub fn literal(value: &str) -> Result<String, &'static str> {
    // `undefined`: pilotd's "no such instant" (a window that does not end).
    if let Some(word) = ["True", "False", "undefined"]
        .into_iter()
        .find(|w| value.eq_ignore_ascii_case(w))
    {
        return Ok(word.into());
    }
    if let Some(inner) = value.strip_prefix('"') {
        let Some(inner) = inner.strip_suffix('"') else {
            return Err("a string must end with a double quote");
        };
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('"' | '\\') => {}
                    _ => return Err("the only escapes allowed in a string are \\\" and \\\\"),
                },
                '"' => return Err("a double quote inside a string must be escaped as \\\""),
                '$' => return Err("'$' is not allowed (condor would expand it as a macro)"),
                c if c.is_control() => return Err("control characters are not allowed"),
                _ => {}
            }
        }
        return Ok(value.to_owned());
    }
    if is_integer(value) || is_real(value) {
        return Ok(value.to_owned());
    }
    Err("expected a number, True, False, undefined or a double-quoted string")
}

fn is_integer(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    !digits.is_empty() && digits.len() <= 19 && digits.bytes().all(|b| b.is_ascii_digit())
}

/// `-?digits.digits([eE][+-]?digits)?`, or digits with an exponent: what ClassAds read as a
/// real, without inf/nan.
fn is_real(s: &str) -> bool {
    let s = s.strip_prefix('-').unwrap_or(s);
    let split = s.split_once(['e', 'E']);
    let (mantissa, exponent) = split.map_or((s, None), |(m, e)| (m, Some(e)));
    let all_digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => all_digits(int) && all_digits(frac),
        None => exponent.is_some() && all_digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| all_digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
    s.len() <= 40 && mantissa_ok && exponent_ok
}

/// Validates the text of an ad file.
pub fn parse(text: &str) -> AdFile {
    let mut out = AdFile::default();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, value) = match attribute(line) {
            Ok(a) => a,
            Err(why) => {
                out.notes.push(format!("line {n}: {why}; dropped"));
                continue;
            }
        };
        if let Some(slot) = out.attrs.iter_mut().find(|(k, _)| k == name) {
            slot.1 = value;
        } else if out.attrs.len() >= MAX_ATTRS {
            out.notes.push(format!(
                "line {n}: more than {MAX_ATTRS} attributes; {name} dropped"
            ));
        } else {
            out.attrs.push((name.to_owned(), value));
        }
    }
    out
}

/// One `NAME = value` line, or why it is dropped.
fn attribute(line: &str) -> Result<(&str, String), String> {
    if line.len() > MAX_LINE {
        return Err(format!("longer than {MAX_LINE} characters"));
    }
    let (name, value) = line
        .split_once('=')
        .ok_or("expected NAME = value".to_string())?;
    let (name, value) = (name.trim(), value.trim());
    if !valid_name(name) {
        return Err(format!(
            "attribute name {name:?} is not allowed (only {PREFIX}[A-Za-z0-9_]+, at most {MAX_NAME} characters)"
        ));
    }
    let value = literal(value).map_err(|why| format!("{name}: value {value:?} refused: {why}"))?;
    Ok((name, value))
}

/// Reads and validates the file; `Ok(None)` when it does not exist (pilotd has not written
/// it yet, or no longer does).
pub fn read(path: &Path) -> Result<Option<AdFile>, AdFileError> {
    let shown = path.display().to_string();
    let unreadable = |e: std::io::Error| AdFileError::Unreadable {
        path: shown.clone(),
        reason: e.to_string(),
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(unreadable(e)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(AdFileError::TooLarge { path: shown });
    }
    let mut parsed = parse(&String::from_utf8_lossy(&bytes));
    for note in &mut parsed.notes {
        *note = format!("ad file {shown}: {note}");
    }
    Ok(Some(parsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pilotds_attributes_pass_as_written() {
        let ad = parse(
            "# written by pilotd\n\
             PILOTD_VERSION = \"0.9.0\"\n\
             PILOTD_INSTANCE = \"lab-3\"\n\n\
             PILOTD_WINDOW_END = 1764792000\n\
             PILOTD_SNOOZED = false\n\
             PILOTD_WINDOW_END2 = Undefined\n\
             PILOTD_EVICTION=\"graceful\"\n\
             PILOTD_LOAD = -0.25\n\
             PILOTD_BIG = 1.5e10\n\
             PILOTD_NOTE = \"say \\\"hi\\\" \\\\ bye\"\n",
        );
        assert_eq!(ad.notes, Vec::<String>::new());
        let pairs: Vec<(&str, &str)> = ad
            .attrs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            pairs,
            vec![
                ("PILOTD_VERSION", "\"0.9.0\""),
                ("PILOTD_INSTANCE", "\"lab-3\""),
                ("PILOTD_WINDOW_END", "1764792000"),
                ("PILOTD_SNOOZED", "False"),
                ("PILOTD_WINDOW_END2", "undefined"),
                ("PILOTD_EVICTION", "\"graceful\""),
                ("PILOTD_LOAD", "-0.25"),
                ("PILOTD_BIG", "1.5e10"),
                ("PILOTD_NOTE", "\"say \\\"hi\\\" \\\\ bye\""),
            ]
        );
    }

    #[test]
    fn anything_that_could_steer_condor_is_dropped_with_a_note_naming_the_line() {
        let ad = parse(
            "START = True\n\
             PILOTD_ = 1\n\
             pilotd_lower = 1\n\
             PILOTD_X-Y = 1\n\
             PILOTD_EXPR = TARGET.Owner == \"x\"\n\
             PILOTD_REF = MY.Memory\n\
             PILOTD_MACRO = \"$(SEC_TOKEN_DIRECTORY)\"\n\
             PILOTD_OPEN = \"no end\n\
             PILOTD_INNER = \"a\" || True || \"b\"\n\
             PILOTD_ESC = \"\\n\"\n\
             PILOTD_TAB = \"a\tb\"\n\
             PILOTD_NAN = nan\n\
             PILOTD_HEX = 0x10\n\
             PILOTD_EMPTY =\n\
             no equals sign\n\
             PILOTD_OK = 7\n",
        );
        assert_eq!(ad.attrs, vec![("PILOTD_OK".to_owned(), "7".to_owned())]);
        assert_eq!(ad.notes.len(), 15, "{:#?}", ad.notes);
        for (i, note) in ad.notes.iter().enumerate() {
            assert!(note.starts_with(&format!("line {}: ", i + 1)), "{note}");
            assert!(note.ends_with("dropped"), "{note}");
        }
        assert!(
            ad.notes[0].contains("\"START\" is not allowed"),
            "{}",
            ad.notes[0]
        );
        assert!(ad.notes[6].contains("'$'"), "{}", ad.notes[6]);
    }

    #[test]
    fn size_caps_hold() {
        let long = format!("PILOTD_LONG = \"{}\"\n", "x".repeat(MAX_LINE));
        assert!(parse(&long).attrs.is_empty());
        let long_name = format!("PILOTD_{} = 1\n", "N".repeat(MAX_NAME));
        assert!(parse(&long_name).attrs.is_empty());
        let many: String = (0..MAX_ATTRS + 5)
            .map(|i| format!("PILOTD_A{i} = {i}\n"))
            .collect();
        let ad = parse(&many);
        assert_eq!(ad.attrs.len(), MAX_ATTRS);
        assert_eq!(ad.notes.len(), 5);
        // A repeated name replaces, and does not count twice.
        let ad = parse("PILOTD_A = 1\nPILOTD_A = 2\n");
        assert_eq!(ad.attrs, vec![("PILOTD_A".to_owned(), "2".to_owned())]);
    }

    #[test]
    fn the_file_is_read_capped_and_a_missing_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pilotd.ad");
        assert!(read(&path).unwrap().is_none());
        std::fs::write(&path, "PILOTD_INSTANCE = \"lab-3\"\nSTART = False\n").unwrap();
        let ad = read(&path).unwrap().unwrap();
        assert_eq!(ad.attrs.len(), 1);
        assert!(ad.notes[0].starts_with(&format!("ad file {}: line 2: ", path.display())));
        std::fs::write(&path, "#".repeat(MAX_FILE_BYTES as usize + 1)).unwrap();
        assert!(matches!(read(&path), Err(AdFileError::TooLarge { .. })));
    }
}
