//! Everything relaylock parses from untrusted input: argument checks, URLs,
//! Redis names, release-channel messages, script replies
//! (`relaylock::__fuzz::inputs`). Run with
//! `cargo +nightly fuzz run inputs -- -max_total_time=60`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    relaylock::__fuzz::inputs(data);
});
