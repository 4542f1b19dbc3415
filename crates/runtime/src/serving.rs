//! The servers a binary runs: the plain-HTTP server of `/metrics`, `/healthz` and `/readyz`
//! ([`http`]), and the HTTPS admission-webhook server ([`webhook`]) with its reloading
//! certificate ([`tls`]).

pub mod http;
pub mod tls;
pub mod webhook;
