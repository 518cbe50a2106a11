//! Typed leaves of the configuration files: durations, sizes, shares, days and times of day.
//! Each has a pure `parse` whose error reads as a diagnostic's message, so the validation
//! pass can report every bad value at its position instead of stopping at the first.

pub(crate) use crate::horizon::MAX_DURATION;
use chrono::Weekday;
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Why a value is not the unit it should be; the message says how to write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("`{text}` is not a duration ({why}); write it like \"90s\", \"15m\" or \"8h\"")]
    Duration { text: String, why: String },
    #[error("a duration cannot be negative ({0})")]
    NegativeDuration(i64),
    #[error("duration `{0}` is too long: pilotd accepts at most 100 years")]
    DurationRange(String),
    #[error("`{0}` is not a size; write it like \"8GiB\" or \"512MiB\"")]
    Size(String),
    #[error("unknown size unit `{unit}` in `{text}`; use KiB, MiB, GiB, TiB (or kB, MB, GB, TB)")]
    SizeUnit { unit: String, text: String },
    #[error("size `{0}` is out of range")]
    SizeRange(String),
    #[error("a share cannot be negative ({0})")]
    NegativeShare(i64),
    #[error("`{0}` has no unit; write a size like \"8GiB\" or a percentage like \"50%\"")]
    BareBytes(i64),
    #[error("`{0}` is not a percentage; write it like \"50%\"")]
    Percent(String),
    #[error("percentage `{0}` must be above 0% and at most 100%")]
    PercentRange(String),
    #[error("`{0}` is neither a count nor a percentage; write 4 or \"50%\"")]
    Count(String),
    #[error(
        "unknown day `{0}`; use mon, tue, wed, thu, fri, sat, sun, a range like mon-fri, a list like sat,sun, or daily"
    )]
    Day(String),
    #[error("no days given; use e.g. \"mon-fri\", \"sat,sun\" or \"daily\"")]
    NoDays,
    /// Every unknown day of a day list, reported together.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Days(Vec<UnitError>),
    #[error("`{0}` is not a time of day; write HH:MM between 00:00 and 24:00, e.g. \"07:30\"")]
    TimeOfDay(String),
    #[error("`{0}` is not an IPv4 address or network (a.b.c.d/n)")]
    NotIpv4(String),
    #[error("`{0}`: the prefix is a number from 0 to 32")]
    Prefix(String),
    #[error("`{raw}` has host bits set; the network is {network}")]
    HostBits { raw: String, network: String },
    #[error("`{0}` is not a temperature; write degrees Celsius like \"80C\"")]
    Temperature(String),
    #[error("`{0}` is not a fan speed; write revolutions per minute like \"3000rpm\"")]
    FanSpeed(String),
}

/// Parses "90s", "15m", "1h 30m", "2days" or a bare number of seconds ("300"), at most
/// [`MAX_DURATION`] (longer ones would overflow the date arithmetic of `decide` and the
/// loop; see `horizon`).
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let d = durations::parse(s).map_err(|why| UnitError::Duration {
        text: s.to_string(),
        why,
    })?;
    bounded(d, || s.to_string())
}

/// A number of seconds written as a TOML integer, bounded like a written duration.
pub(crate) fn duration_from_secs(n: i64) -> Result<Duration, UnitError> {
    let secs = u64::try_from(n).map_err(|_| UnitError::NegativeDuration(n))?;
    bounded(Duration::from_secs(secs), || n.to_string())
}

fn bounded(d: Duration, text: impl FnOnce() -> String) -> Result<Duration, UnitError> {
    if d > MAX_DURATION {
        Err(UnitError::DurationRange(text()))
    } else {
        Ok(d)
    }
}

/// Formats a duration the way owners write it ("8h", "1h 30m").
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// A duration in a config file: a humantime string ("15m") or a number of seconds.
/// Deserializing it gives serde errors with the value's position for free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = StrOrInt::deserialize(d)?;
        v.duration()
            .map(HumanDuration)
            .map_err(serde::de::Error::custom)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

/// A string or an integer, as owners write both `cpus = 4` and `cpus = "50%"`.
/// Implemented by hand (not `#[serde(untagged)]`, which loses error positions).
#[derive(Debug, Clone, PartialEq)]
pub enum StrOrInt {
    Str(String),
    Int(i64),
}

impl StrOrInt {
    /// A duration as written ("15m") or as a number of seconds.
    pub(crate) fn duration(&self) -> Result<Duration, UnitError> {
        match self {
            StrOrInt::Int(n) => duration_from_secs(*n),
            StrOrInt::Str(s) => parse_duration(s),
        }
    }
}

impl fmt::Display for StrOrInt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StrOrInt::Str(s) => write!(f, "\"{s}\""),
            StrOrInt::Int(n) => write!(f, "{n}"),
        }
    }
}

impl<'de> Deserialize<'de> for StrOrInt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = StrOrInt;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<StrOrInt, E> {
                Ok(StrOrInt::Str(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<StrOrInt, E> {
                Ok(StrOrInt::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<StrOrInt, E> {
                i64::try_from(v)
                    .map(StrOrInt::Int)
                    .map_err(|_| E::custom("number too large"))
            }
        }
        d.deserialize_any(V)
    }
}

/// Parses a size: "2GiB", "512MiB", "8GB", "1.5GiB", "100k", or a bare number of bytes.
/// Binary (KiB, MiB, GiB, TiB) and decimal (kB, MB, GB, TB) units are both accepted.
pub(crate) fn parse_size(s: &str) -> Result<u64, UnitError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let num: f64 = num.parse().map_err(|_| UnitError::Size(s.to_string()))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "ki" => 1 << 10,
        "m" | "mib" | "mi" => 1 << 20,
        "g" | "gib" | "gi" => 1 << 30,
        "t" | "tib" | "ti" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        other => {
            return Err(UnitError::SizeUnit {
                unit: other.to_string(),
                text: s.to_string(),
            });
        }
    };
    let bytes = num * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(UnitError::SizeRange(s.to_string()));
    }
    Ok(bytes as u64)
}

/// Formats bytes with a binary unit, e.g. "7.8GiB".
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 || (v.fract() == 0.0) {
        format!("{}{}", v as u64, UNITS[i])
    } else {
        format!("{v:.1}{}", UNITS[i])
    }
}

/// A share of one resource: a percentage of the machine or an absolute amount (a count of
/// CPUs or GPUs, or bytes of memory or disk).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Share {
    /// 0 < p ≤ 100.
    Percent(f64),
    Amount(u64),
}

impl Share {
    /// The amount this share stands for on a machine that has `total` of the resource.
    pub fn of(self, total: u64) -> u64 {
        match self {
            Share::Percent(p) => ((total as f64) * p / 100.0).floor() as u64,
            Share::Amount(a) => a,
        }
    }
}

/// What kind of amount a share counts, for parsing and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareUnit {
    Count,
    Bytes,
}

/// Parses a share: "50%", or a count (`4`, "4") for `Count`, or a size ("8GiB") for `Bytes`.
pub fn parse_share(v: &StrOrInt, unit: ShareUnit) -> Result<Share, UnitError> {
    match v {
        StrOrInt::Int(n) if *n < 0 => Err(UnitError::NegativeShare(*n)),
        StrOrInt::Int(n) => match unit {
            ShareUnit::Count => Ok(Share::Amount(*n as u64)),
            ShareUnit::Bytes => Err(UnitError::BareBytes(*n)),
        },
        StrOrInt::Str(s) => {
            let t = s.trim();
            if let Some(p) = t.strip_suffix('%') {
                let p: f64 = p
                    .trim()
                    .parse()
                    .map_err(|_| UnitError::Percent(s.clone()))?;
                if !(p > 0.0 && p <= 100.0) {
                    return Err(UnitError::PercentRange(s.clone()));
                }
                return Ok(Share::Percent(p));
            }
            match unit {
                ShareUnit::Count => t
                    .parse::<u64>()
                    .map(Share::Amount)
                    .map_err(|_| UnitError::Count(s.clone())),
                ShareUnit::Bytes => parse_size(t).map(Share::Amount),
            }
        }
    }
}

/// Parses a temperature in degrees Celsius: `80`, "80C", "80 °C", "79.5C" (the unit the
/// kernel's sensors report in, as millidegrees).
pub fn parse_celsius(v: &StrOrInt) -> Result<f64, UnitError> {
    let text = match v {
        StrOrInt::Int(n) => return Ok(*n as f64),
        StrOrInt::Str(s) => s,
    };
    let t = text.trim();
    let number = t
        .strip_suffix("°C")
        .or_else(|| t.strip_suffix('C'))
        .or_else(|| t.strip_suffix('c'))
        .unwrap_or(t)
        .trim();
    match number.parse::<f64>() {
        Ok(c) if c.is_finite() => Ok(c),
        _ => Err(UnitError::Temperature(text.clone())),
    }
}

/// Parses a fan speed in revolutions per minute: `3000` or "3000rpm" ("3000 RPM").
pub fn parse_rpm(v: &StrOrInt) -> Result<u64, UnitError> {
    let text = match v {
        StrOrInt::Int(n) => {
            return u64::try_from(*n).map_err(|_| UnitError::FanSpeed(n.to_string()));
        }
        StrOrInt::Str(s) => s,
    };
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    lower
        .strip_suffix("rpm")
        .unwrap_or(&lower)
        .trim()
        .parse::<u64>()
        .map_err(|_| UnitError::FanSpeed(text.clone()))
}

/// A set of weekdays, bit 0 = Monday.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DaySet(pub u8);

impl DaySet {
    pub(crate) const ALL: DaySet = DaySet(0x7f);

    pub fn contains(self, day: Weekday) -> bool {
        self.0 & (1 << day.num_days_from_monday()) != 0
    }

    pub(crate) fn insert(&mut self, day: Weekday) {
        self.0 |= 1 << day.num_days_from_monday();
    }
}

impl fmt::Display for DaySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == DaySet::ALL {
            return f.write_str("daily");
        }
        let names: Vec<&str> = WEEK
            .iter()
            .filter(|d| self.contains(**d))
            .map(|d| day_name(*d))
            .collect();
        f.write_str(&names.join(","))
    }
}

pub(crate) const WEEK: [Weekday; 7] = [
    Weekday::Mon,
    Weekday::Tue,
    Weekday::Wed,
    Weekday::Thu,
    Weekday::Fri,
    Weekday::Sat,
    Weekday::Sun,
];

pub(crate) fn day_name(d: Weekday) -> &'static str {
    ["mon", "tue", "wed", "thu", "fri", "sat", "sun"][d.num_days_from_monday() as usize]
}

fn parse_day(s: &str) -> Result<Weekday, UnitError> {
    // chrono reads "mon" and "monday" alike, in any case, and nothing else.
    s.trim()
        .parse()
        .map_err(|_| UnitError::Day(s.trim().to_string()))
}

/// Parses "mon-fri", "sat,sun", "mon,wed-fri", "daily". Ranges may wrap ("fri-mon").
pub fn parse_days(s: &str) -> Result<DaySet, UnitError> {
    let t = s.trim().to_ascii_lowercase();
    if t == "daily" || t == "all" || t == "every day" {
        return Ok(DaySet::ALL);
    }
    if t.is_empty() {
        return Err(UnitError::NoDays);
    }
    let mut set = DaySet::default();
    let mut errors = Vec::new();
    for part in t.split(',') {
        match part.split_once('-') {
            Some((a, b)) => match (parse_day(a), parse_day(b)) {
                (Ok(a), Ok(b)) => {
                    let mut d = a;
                    loop {
                        set.insert(d);
                        if d == b {
                            break;
                        }
                        d = d.succ();
                    }
                }
                (a, b) => errors.extend([a.err(), b.err()].into_iter().flatten()),
            },
            None => match parse_day(part) {
                Ok(d) => set.insert(d),
                Err(e) => errors.push(e),
            },
        }
    }
    match errors.len() {
        0 => Ok(set),
        1 => Err(errors.remove(0)),
        _ => Err(UnitError::Days(errors)),
    }
}

/// Minutes since local midnight, 0..=1440 (1440 is "24:00", allowed as an end).
pub(crate) type Minute = u16;

/// Parses "HH:MM" (00:00–24:00).
pub fn parse_time_of_day(s: &str) -> Result<Minute, UnitError> {
    let bad = || UnitError::TimeOfDay(s.to_string());
    let (h, m) = s.trim().split_once(':').ok_or_else(bad)?;
    if h.is_empty() || h.len() > 2 || m.len() != 2 {
        return Err(bad());
    }
    let h: u16 = h.parse().map_err(|_| bad())?;
    let m: u16 = m.parse().map_err(|_| bad())?;
    if m >= 60 || h > 24 || (h == 24 && m != 0) {
        return Err(bad());
    }
    Ok(h * 60 + m)
}

/// What a worker may not reach unless allowed: the private ranges (RFC 1918), shared address
/// space (RFC 6598), link-local (RFC 3927, cloud metadata), "this network", IETF protocol
/// assignments, benchmarking, multicast and reserved space.
pub const REFUSED: [&str; 10] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
    "100.64.0.0/10",
    "0.0.0.0/8",
    "192.0.0.0/24",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// An IPv4 network, `a.b.c.d/n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Net {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Net {
    /// Whether `addr` is in this network.
    pub fn contains(self, addr: Ipv4Addr) -> bool {
        let mask = u32::MAX
            .checked_shl(u32::from(32 - self.prefix))
            .unwrap_or(0);
        u32::from(addr) & mask == u32::from(self.addr)
    }

    /// Whether pilotd's egress filter refuses `addr` (it is in one of [`REFUSED`]).
    pub fn refused(addr: Ipv4Addr) -> bool {
        REFUSED
            .iter()
            .filter_map(|r| Ipv4Net::parse(r).ok())
            .any(|n| n.contains(addr))
    }

    pub fn parse(raw: &str) -> Result<Ipv4Net, UnitError> {
        let (addr, prefix) = match raw.trim().split_once('/') {
            Some((a, p)) => (
                a,
                p.parse::<u8>()
                    .map_err(|_| UnitError::Prefix(raw.to_owned()))?,
            ),
            None => (raw.trim(), 32),
        };
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| UnitError::NotIpv4(raw.to_owned()))?;
        if prefix > 32 {
            return Err(UnitError::Prefix(raw.to_owned()));
        }
        let mask = u32::MAX.checked_shl(u32::from(32 - prefix)).unwrap_or(0);
        if u32::from(addr) & !mask != 0 {
            return Err(UnitError::HostBits {
                raw: raw.to_owned(),
                network: format!("{}/{prefix}", Ipv4Addr::from(u32::from(addr) & mask)),
            });
        }
        Ok(Ipv4Net { addr, prefix })
    }
}

impl fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("300").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-5m").is_err());
    }

    #[test]
    fn durations_past_a_hundred_years_are_refused_not_overflowed() {
        for long in ["300000years", "18446744073709551615", "101years"] {
            let e = parse_duration(long).unwrap_err();
            assert_eq!(e, UnitError::DurationRange(long.into()), "{long}");
        }
        assert_eq!(parse_duration("99years").unwrap().as_secs(), 3_124_202_400);
        assert!(duration_from_secs(i64::MAX).is_err());
        assert!(duration_from_secs(-1).is_err());
        assert_eq!(duration_from_secs(300).unwrap().as_secs(), 300);
    }

    #[test]
    fn temperatures_and_fan_speeds() {
        let s = |t: &str| StrOrInt::Str(t.into());
        for (text, c) in [
            ("80C", 80.0),
            ("80 °C", 80.0),
            ("79.5c", 79.5),
            (" 85 ", 85.0),
        ] {
            assert_eq!(parse_celsius(&s(text)).unwrap(), c, "{text}");
        }
        assert_eq!(parse_celsius(&StrOrInt::Int(75)).unwrap(), 75.0);
        for bad in ["176F", "hot", "80K", "", "NaNC", "infC"] {
            assert_eq!(
                parse_celsius(&s(bad)),
                Err(UnitError::Temperature(bad.into())),
                "{bad}"
            );
        }
        for (text, rpm) in [("3000rpm", 3000), ("2500 RPM", 2500), ("1800", 1800)] {
            assert_eq!(parse_rpm(&s(text)).unwrap(), rpm, "{text}");
        }
        assert_eq!(parse_rpm(&StrOrInt::Int(2000)).unwrap(), 2000);
        assert!(parse_rpm(&StrOrInt::Int(-1)).is_err());
        for bad in ["fast", "3000rps", "3.5krpm", "-20rpm"] {
            assert_eq!(
                parse_rpm(&s(bad)),
                Err(UnitError::FanSpeed(bad.into())),
                "{bad}"
            );
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert_eq!(parse_size("512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("8GB").unwrap(), 8_000_000_000);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("2 parsecs").is_err());
        assert!(parse_size("GiB").is_err());
        assert_eq!(format_size(2 << 30), "2GiB");
        assert_eq!(format_size(1536 << 20), "1.5GiB");
    }

    #[test]
    fn shares() {
        let s = |x: &str| StrOrInt::Str(x.into());
        assert_eq!(
            parse_share(&s("50%"), ShareUnit::Count).unwrap(),
            Share::Percent(50.0)
        );
        assert_eq!(
            parse_share(&StrOrInt::Int(3), ShareUnit::Count).unwrap(),
            Share::Amount(3)
        );
        assert_eq!(
            parse_share(&s("3"), ShareUnit::Count).unwrap(),
            Share::Amount(3)
        );
        assert_eq!(
            parse_share(&s("8GiB"), ShareUnit::Bytes).unwrap(),
            Share::Amount(8 << 30)
        );
        assert!(parse_share(&s("101%"), ShareUnit::Count).is_err());
        assert!(parse_share(&s("0%"), ShareUnit::Count).is_err());
        assert!(parse_share(&StrOrInt::Int(8), ShareUnit::Bytes).is_err());
        assert!(parse_share(&StrOrInt::Int(-1), ShareUnit::Count).is_err());
        assert_eq!(Share::Percent(50.0).of(7), 3);
    }

    #[test]
    fn days() {
        assert_eq!(parse_days("daily").unwrap(), DaySet::ALL);
        assert_eq!(parse_days("mon-fri").unwrap(), DaySet(0b0011111));
        assert_eq!(parse_days("sat,sun").unwrap(), DaySet(0b1100000));
        assert_eq!(parse_days("fri-mon").unwrap(), DaySet(0b1110001));
        assert_eq!(parse_days("Monday, wed").unwrap(), DaySet(0b0000101));
        assert_eq!(parse_days("WEDNESDAY-thursday").unwrap(), DaySet(0b0001100));
        for near in ["tues", "mo", "mondays", "sat day"] {
            assert_eq!(
                parse_days(near).unwrap_err(),
                UnitError::Day(near.into()),
                "{near}"
            );
        }
        let e = parse_days("mon,funday,tue-blursday")
            .unwrap_err()
            .to_string();
        assert!(e.contains("funday") && e.contains("blursday"), "{e}");
        assert_eq!(
            parse_days("mon-fri").unwrap().to_string(),
            "mon,tue,wed,thu,fri"
        );
    }

    #[test]
    fn times() {
        assert_eq!(parse_time_of_day("00:00").unwrap(), 0);
        assert_eq!(parse_time_of_day("07:30").unwrap(), 450);
        assert_eq!(parse_time_of_day("7:30").unwrap(), 450);
        assert_eq!(parse_time_of_day("24:00").unwrap(), 1440);
        for bad in ["24:01", "25:00", "12:60", "noon", "12", "12:5", "-1:00"] {
            assert!(parse_time_of_day(bad).is_err(), "{bad}");
        }
    }
    #[test]
    fn networks_parse_strictly() {
        assert_eq!(
            Ipv4Net::parse("10.20.0.0/16").unwrap().to_string(),
            "10.20.0.0/16"
        );
        assert_eq!(
            Ipv4Net::parse("192.168.1.5").unwrap().to_string(),
            "192.168.1.5/32"
        );
        for bad in [
            "10.20.0.1/16",
            "10.0.0.0/33",
            "pool.example.org",
            "10.0.0/8",
            "",
        ] {
            assert!(Ipv4Net::parse(bad).is_err(), "{bad:?}");
        }
    }
}
