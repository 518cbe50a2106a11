//! Arbitrary bytes as a worker's last lines of output: pilotd reads the pilot's job report
//! from them as root, and a job may write there, so every input must end in a report, an
//! error or "no report", never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pilot_contract::JobReport;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = JobReport::find_last(text.lines());
});
