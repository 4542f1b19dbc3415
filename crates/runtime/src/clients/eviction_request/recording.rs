//! A fake apiserver for the unit tests of both APIs' requesters.

use std::sync::{Arc, Mutex};

use axum::http::{Request, Response};
use kube::Client;
use kube::client::Body;

/// A client whose apiserver answers every call with `request` and records each call as
/// `METHOD path`.
pub(super) fn recording(request: &impl serde::Serialize) -> (Client, Arc<Mutex<Vec<String>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (seen, answer) = (calls.clone(), serde_json::to_vec(request).unwrap());
    let service = tower::service_fn(move |call: Request<Body>| {
        seen.lock()
            .unwrap()
            .push(format!("{} {}", call.method(), call.uri().path()));
        let answer = answer.clone();
        async move { Ok::<_, std::convert::Infallible>(Response::new(Body::from(answer))) }
    });
    (Client::new(service, "default"), calls)
}
