//! Every webhook of every binary, as the apiserver reaches it: the first byte picks the
//! webhook, the rest is the body (arbitrary JSON, huge, deeply nested, wrong kinds). Each is
//! answered with an AdmissionReview for its uid, or a 4xx, never a panic (see `review`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((webhook, body)) = evictkit_fuzz::route(data) {
        evictkit_fuzz::review(webhook, body);
    }
});
