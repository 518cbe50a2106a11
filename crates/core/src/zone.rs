//! The owner's time zone, read from the system's tz database (/usr/share/zoneinfo, Debian's
//! `tzdata`) as a `chrono::TimeZone`.
//!
//! The system's database, not one compiled in: the owner's windows then follow the same
//! rules as the desktop's clock, and a tzdata update from the distribution reaches pilotd
//! without a new build. It also keeps the daemon small: a compiled-in database (chrono-tz)
//! was 1.2 MB of pointer tables that the loader relocates at every start, about 2 MiB of
//! the idle daemon's resident memory (tests/bench/footprint.sh). `UTC` needs no file.
//!
//! jiff reads and caches the zone files (TZif, with the POSIX rule for instants past the
//! last transition); this module only adapts its answers to chrono, which the rest of the
//! code speaks.

use chrono::{FixedOffset, MappedLocalTime, NaiveDate, NaiveDateTime};
use std::fmt;

#[derive(Debug, thiserror::Error)]
#[error("unknown time zone `{name}`: {message}")]
pub struct ZoneError {
    pub name: String,
    pub message: String,
}

/// A time zone by its IANA name; cheap to clone (the rules are shared).
#[derive(Clone)]
pub struct Zone {
    name: std::sync::Arc<str>,
    tz: jiff::tz::TimeZone,
}

impl Zone {
    /// Coordinated Universal Time, without the database.
    pub fn utc() -> Zone {
        Zone {
            name: "UTC".into(),
            tz: jiff::tz::TimeZone::UTC,
        }
    }

    /// The zone of this IANA name (`Europe/Rome`), from the system's database.
    pub fn named(name: &str) -> Result<Zone, ZoneError> {
        if matches!(name, "UTC" | "Etc/UTC") {
            return Ok(Zone::utc());
        }
        // jiff also takes POSIX TZ strings and fixed offsets; an owner's policy names a zone.
        let plausible = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '+'))
            && !name.starts_with('/')
            && !name.split('/').any(|part| part.is_empty() || part == "..");
        if !plausible {
            return Err(ZoneError {
                name: name.into(),
                message: "not an IANA zone name".into(),
            });
        }
        let tz = jiff::tz::db().get(name).map_err(|_| ZoneError {
            name: name.into(),
            message:
                "not in the system's time zone database (/usr/share/zoneinfo, Debian's tzdata)"
                    .into(),
        })?;
        Ok(Zone {
            name: tz.iana_name().unwrap_or(name).into(),
            tz,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every zone name the system's database knows, sorted.
    pub fn available() -> Vec<String> {
        let mut names: Vec<String> = jiff::tz::db().available().map(|n| n.to_string()).collect();
        names.sort();
        names
    }

    /// The offset in effect at `at` (UTC seconds), with its abbreviation (`CET`), which
    /// chrono prints for `%Z`.
    fn at(&self, at: i64) -> ZoneOffset {
        // Outside jiff's range (years beyond ±9999) no clock reads: UTC, no panic.
        let Ok(t) = jiff::Timestamp::from_second(at) else {
            return self.offset(jiff::tz::Offset::UTC, "UTC");
        };
        let info = self.tz.to_offset_info(t);
        self.offset(info.offset(), info.abbreviation())
    }

    fn offset(&self, offset: jiff::tz::Offset, abbreviation: &str) -> ZoneOffset {
        let mut abbr = [0u8; 8];
        let len = abbreviation.len().min(abbr.len());
        abbr[..len].copy_from_slice(&abbreviation.as_bytes()[..len]);
        ZoneOffset {
            zone: self.clone(),
            // jiff's offsets stay within ±25:59:59, chrono's within ±24h: clamp, never panic.
            fixed: FixedOffset::east_opt(offset.seconds().clamp(-86_399, 86_399))
                .unwrap_or(FixedOffset::east_opt(0).expect("zero is a valid offset")),
            abbr,
            len: len as u8,
        }
    }

    /// The local time `local` read with `offset` (one of the zone's answers for it): the
    /// instant it names has that offset in effect, and the abbreviation in effect then.
    fn local_offset(&self, local: &NaiveDateTime, offset: jiff::tz::Offset) -> ZoneOffset {
        self.at(local.and_utc().timestamp() - i64::from(offset.seconds()))
    }

    fn civil(local: &NaiveDateTime) -> Option<jiff::civil::DateTime> {
        use chrono::{Datelike, Timelike};
        jiff::civil::DateTime::new(
            i16::try_from(local.year()).ok()?,
            local.month() as i8,
            local.day() as i8,
            local.hour() as i8,
            local.minute() as i8,
            local.second().min(59) as i8,
            0,
        )
        .ok()
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Zone({})", self.name)
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl std::str::FromStr for Zone {
    type Err = ZoneError;
    fn from_str(s: &str) -> Result<Zone, ZoneError> {
        Zone::named(s)
    }
}

impl serde::Serialize for Zone {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name)
    }
}

impl<'de> serde::Deserialize<'de> for Zone {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Zone, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Zone::named(&name).map_err(serde::de::Error::custom)
    }
}

/// An offset of a `Zone` at some instant (chrono keeps the zone with every local time),
/// with its abbreviation inline: no allocation per local time.
#[derive(Clone)]
pub struct ZoneOffset {
    zone: Zone,
    fixed: FixedOffset,
    abbr: [u8; 8],
    len: u8,
}

impl ZoneOffset {
    /// `CET`, `EDT`, `+0530`; the numeric offset when the zone names none.
    fn abbreviation(&self) -> Option<&str> {
        std::str::from_utf8(&self.abbr[..usize::from(self.len)])
            .ok()
            .filter(|a| !a.is_empty())
    }
}

impl fmt::Debug for ZoneOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self} ({})", self.fixed)
    }
}

impl fmt::Display for ZoneOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.abbreviation() {
            Some(a) => f.write_str(a),
            None => write!(f, "{}", self.fixed),
        }
    }
}

impl chrono::Offset for ZoneOffset {
    fn fix(&self) -> FixedOffset {
        self.fixed
    }
}

impl chrono::TimeZone for Zone {
    type Offset = ZoneOffset;

    fn from_offset(offset: &ZoneOffset) -> Zone {
        offset.zone.clone()
    }

    fn offset_from_local_date(&self, local: &NaiveDate) -> MappedLocalTime<ZoneOffset> {
        match local.and_hms_opt(0, 0, 0) {
            Some(midnight) => self.offset_from_local_datetime(&midnight),
            None => MappedLocalTime::None,
        }
    }

    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> MappedLocalTime<ZoneOffset> {
        use jiff::tz::AmbiguousOffset;
        let Some(civil) = Zone::civil(local) else {
            return MappedLocalTime::None;
        };
        match self.tz.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => {
                MappedLocalTime::Single(self.local_offset(local, offset))
            }
            AmbiguousOffset::Gap { .. } => MappedLocalTime::None,
            AmbiguousOffset::Fold { before, after } => MappedLocalTime::Ambiguous(
                self.local_offset(local, before),
                self.local_offset(local, after),
            ),
        }
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> ZoneOffset {
        self.at(utc
            .and_hms_opt(0, 0, 0)
            .map_or(0, |m| m.and_utc().timestamp()))
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> ZoneOffset {
        self.at(utc.and_utc().timestamp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, TimeZone, Timelike, Utc};

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn rome_follows_its_rules_across_both_changes_and_far_ahead() {
        let rome = Zone::named("Europe/Rome").unwrap();
        // Winter +1, summer +2; the 2026 changes are on 29 March and 25 October.
        for (at, hour) in [
            ("2026-01-15T12:00:00Z", 13),
            ("2026-03-29T00:59:59Z", 1),
            ("2026-03-29T01:00:00Z", 3),
            ("2026-07-01T12:00:00Z", 14),
            ("2026-10-25T00:59:59Z", 2),
            ("2026-10-25T01:00:00Z", 2),
            // Past any file's last listed transition: the POSIX rule says summer time.
            ("2090-07-01T12:00:00Z", 14),
        ] {
            assert_eq!(utc(at).with_timezone(&rome).hour(), hour, "{at}");
        }
        let shown = |at: &str| {
            utc(at)
                .with_timezone(&rome)
                .format("%a %H:%M %Z")
                .to_string()
        };
        assert_eq!(shown("2026-01-13T21:30:00Z"), "Tue 22:30 CET");
        assert_eq!(shown("2026-07-14T21:30:00Z"), "Tue 23:30 CEST");
        let naive = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M").unwrap();
        // 02:30 on 29 March does not exist; 02:30 on 25 October happens twice.
        assert!(matches!(
            rome.from_local_datetime(&naive("2026-03-29 02:30")),
            MappedLocalTime::None
        ));
        match rome.from_local_datetime(&naive("2026-10-25 02:30")) {
            MappedLocalTime::Ambiguous(a, b) => {
                assert_eq!(a.with_timezone(&Utc), utc("2026-10-25T00:30:00Z"));
                assert_eq!(b.with_timezone(&Utc), utc("2026-10-25T01:30:00Z"));
                assert_eq!(a.format("%Z").to_string(), "CEST");
                assert_eq!(b.format("%Z").to_string(), "CET");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_are_checked_and_kept() {
        assert_eq!(Zone::named("UTC").unwrap(), Zone::utc());
        assert_eq!(
            Zone::named("America/Chicago").unwrap().name(),
            "America/Chicago"
        );
        for bad in [
            "Mars/Olympus",
            "",
            "../etc/passwd",
            "/etc/localtime",
            "EST5EDT,M3.2.0,M11.1.0",
        ] {
            let e = Zone::named(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("unknown time zone `{bad}`")), "{e}");
        }
        let z: Zone = serde_json::from_str("\"Asia/Tokyo\"").unwrap();
        assert_eq!(serde_json::to_string(&z).unwrap(), "\"Asia/Tokyo\"");
        assert!(Zone::available().iter().any(|n| n == "Europe/Rome"));
    }
}
