//! End-to-end tests of evictkit against a real control plane; the tests live in `tests/`.
