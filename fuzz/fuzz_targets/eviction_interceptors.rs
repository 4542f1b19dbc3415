//! `evictkit.io/eviction-interceptors` (the evictionrequest-controller and its pod webhook):
//! any text is parsed or refused with a message naming the entry, and what parses prints back
//! to the same list.
#![no_main]

use evictkit_core::eviction_request::crd::PodInterceptors;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    match PodInterceptors::parse(value) {
        Ok(interceptors) => {
            let printed = interceptors.to_string();
            assert_eq!(
                PodInterceptors::parse(&printed).as_ref(),
                Ok(&interceptors),
                "{printed:?} does not parse back to what it printed"
            );
        }
        Err(error) => assert!(!error.to_string().is_empty(), "a refusal without a reason"),
    }
});
