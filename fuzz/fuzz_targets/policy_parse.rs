//! Arbitrary text as an owner's policy.toml: the owner edits it by hand, so every input must
//! end in a policy or a diagnostic, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use pilotd_core::config::{SiteConfig, parse_policy};

fuzz_target!(|data: &[u8]| {
    if let Ok(src) = std::str::from_utf8(data) {
        let _ = parse_policy(
            Path::new("policy.toml"),
            src,
            &SiteConfig::defaults(),
            None,
            pilotd_core::zone::Zone::utc(),
        );
    }
});
