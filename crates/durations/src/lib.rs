//! The one grammar of a written duration, shared by pilotd's configuration (`config::units`,
//! which adds its upper bound and typed error) and the pilot's environment (`settings`): whole
//! seconds ("300") or humantime ("90s", "5m", "1h 30m", "2days"), surrounding blanks ignored.

use std::time::Duration;

/// Parses `s`; the error says why in humantime's words.
pub fn parse(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    match t.parse::<u64>() {
        Ok(secs) => Ok(Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(t).map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_or_humantime() {
        assert_eq!(parse("300"), Ok(Duration::from_secs(300)));
        assert_eq!(parse(" 5m "), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("2days"), Ok(Duration::from_secs(172_800)));
        for bad in ["", "soon", "-5", "5 parsecs"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
