//! A recording fake apiserver behind kube's [`Client`], for the components' reconcile and review
//! tests: one reconcile step runs in milliseconds against scripted answers, and the test asserts
//! the calls it made (`METHOD path`, the query, the body sent) rather than only its result.
//!
//! Every call is answered at once, in the order the component makes them, so a test replays
//! exactly an interleaving a watch delivers under load. Answers are scripted per method and
//! path ([`FakeApi::on`]); a call no route matches is answered as an apiserver with no such
//! object would: a create gets the object sent back (201), anything else 404. An answer may be
//! computed from the call ([`Answer::computed`], e.g. a SubjectAccessReview's verdict from the
//! user it names) and may come late ([`Answer::after`]), so that concurrent calls overlap as
//! they do against a busy apiserver.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use evictkit_fake_api::{Answer, FakeApi};
//! use k8s_openapi::api::core::v1::Pod;
//! use serde_json::json;
//!
//! let api = FakeApi::new().on(
//!     "GET",
//!     "/api/v1/namespaces/ns/pods/web-0",
//!     Answer::object(json!({"metadata": {"name": "web-0", "namespace": "ns"}})),
//! );
//! let pods: kube::Api<Pod> = kube::Api::namespaced(api.client(), "ns");
//! assert!(pods.get_opt("web-0").await.unwrap().is_some());
//! assert!(pods.get_opt("web-1").await.unwrap().is_none());
//! assert_eq!(
//!     api.lines(),
//!     ["GET /api/v1/namespaces/ns/pods/web-0", "GET /api/v1/namespaces/ns/pods/web-1"]
//! );
//! # }
//! ```

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// One call the component made.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub method: Method,
    pub path: String,
    /// The query string as sent (`fieldManager=...&force=true`), empty if none.
    pub query: String,
    /// The body sent, when it was JSON.
    pub body: Option<Value>,
}

impl Call {
    /// `METHOD path`, as tests compare calls.
    pub fn line(&self) -> String {
        self.to_string()
    }

    /// Whether the query has `key=value` (compared decoded: `fieldManager=evictkit.io/x` for
    /// the `evictkit.io%2Fx` sent).
    pub fn has_query(&self, key_value: &str) -> bool {
        self.query
            .split('&')
            .any(|pair| percent_decoded(pair) == key_value)
    }

    /// `object` as this call's body leaves it: a JSON patch (RFC 6902, a list of operations,
    /// as a write at a resourceVersion sends) applied, anything else (a merge patch, an apply)
    /// merged in (RFC 7386); `None` where the JSON patch does not apply (a path not there).
    pub fn patched(&self, object: &Value) -> Option<Value> {
        let mut object = object.clone();
        match &self.body {
            Some(operations @ Value::Array(_)) => {
                let patch: json_patch::Patch = serde_json::from_value(operations.clone()).ok()?;
                json_patch::patch(&mut object, &patch.0).ok()?;
            }
            Some(body) => merge(&mut object, body),
            None => {}
        }
        Some(object)
    }

    /// The body's value at `pointer` (RFC 6901, e.g. `/status/conditions/0/type`), `Null` if
    /// absent.
    pub fn field(&self, pointer: &str) -> &Value {
        self.body
            .as_ref()
            .and_then(|body| body.pointer(pointer))
            .unwrap_or(&Value::Null)
    }

    /// A call about Events (events.k8s.io, what `EventRecorder` sends, or core v1): a create,
    /// or the update of a series.
    pub fn is_event(&self) -> bool {
        let core = self.path.starts_with("/api/v1/")
            && self.path.split('/').any(|segment| segment == "events");
        self.path.starts_with("/apis/events.k8s.io/") || core
    }

    fn is_new_event(&self) -> bool {
        self.method == Method::POST && self.is_event()
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

/// What the fake answers a call with.
#[derive(Debug, Clone)]
pub struct Answer {
    reply: Reply,
    /// How long the answer takes, from the call's arrival (recorded then).
    delay: Duration,
}

/// An answer made from the call it answers.
#[derive(Clone)]
struct Compute(Arc<dyn Fn(&Call) -> Answer + Send + Sync>);

// A function has no Debug of its own.
impl fmt::Debug for Compute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Compute(..)")
    }
}

#[derive(Debug, Clone)]
enum Reply {
    Object(Value),
    /// The object with the call's body merged into it (RFC 7386).
    Patched(Value),
    /// The call's body, as a create returns the object created.
    Echo,
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    Raw {
        code: u16,
        body: Value,
    },
    Computed(Compute),
}

impl Answer {
    fn at_once(reply: Reply) -> Self {
        Answer {
            reply,
            delay: Duration::ZERO,
        }
    }

    /// 200 with `object`.
    pub fn object(object: Value) -> Self {
        Self::at_once(Reply::Object(object))
    }

    /// 200 with `object` as the call's patch leaves it ([`Call::patched`]), as the apiserver
    /// answers a patch or an apply of some fields of an object it has: the written object, of
    /// which the decisions read more than the fields sent; 422 where a JSON patch does not
    /// apply.
    pub fn patched(object: Value) -> Self {
        Self::at_once(Reply::Patched(object))
    }

    /// 201 with the call's body, as the apiserver answers a create.
    pub fn echo() -> Self {
        Self::at_once(Reply::Echo)
    }

    /// A list of `items` (the `kind` e.g. `PodList`).
    pub fn list(kind: &str, items: Vec<Value>) -> Self {
        Self::object(json!({
            "apiVersion": "v1", "kind": kind,
            "metadata": {"resourceVersion": "1"},
            "items": items,
        }))
    }

    /// A failure `Status` with `code`, `reason` (e.g. `TooManyRequests`) and `message`.
    pub fn status(code: u16, reason: &str, message: &str) -> Self {
        Self::at_once(Reply::Status {
            code,
            reason: reason.to_owned(),
            message: message.to_owned(),
        })
    }

    /// 201 with a `Status` of success, as the Eviction API answers an eviction it carried out.
    pub fn evicted() -> Self {
        Self::at_once(Reply::Raw {
            code: 201,
            body: json!({"apiVersion": "v1", "kind": "Status", "status": "Success", "code": 201}),
        })
    }

    /// 429 with a `DisruptionBudget` cause, as the Eviction API refuses an eviction a
    /// PodDisruptionBudget blocks; `message` is the cause's.
    pub fn blocked_by_budget(message: &str) -> Self {
        Self::at_once(Reply::Raw {
            code: 429,
            body: json!({
                "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 429,
                "reason": "TooManyRequests",
                "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                "details": {"causes": [{"reason": "DisruptionBudget", "message": message}]},
            }),
        })
    }

    /// 404, as for an object that does not exist.
    pub fn not_found() -> Self {
        Self::status(404, "NotFound", "not found")
    }

    /// The answer `compute` makes of the call, e.g. a review's verdict from what it asks.
    pub fn computed(compute: impl Fn(&Call) -> Answer + Send + Sync + 'static) -> Self {
        Self::at_once(Reply::Computed(Compute(Arc::new(compute))))
    }

    /// This answer, given `delay` after the call arrives (on tokio's clock, which a test may
    /// pause): calls made meanwhile overlap it, as against a busy apiserver.
    pub fn after(self, delay: Duration) -> Self {
        Answer { delay, ..self }
    }

    /// The answer to `call`, computed if it is to be, with the delays of both.
    fn resolve(self, call: &Call) -> Self {
        let Reply::Computed(compute) = &self.reply else {
            return self;
        };
        let answer = (compute.0)(call).resolve(call);
        Answer {
            reply: answer.reply,
            delay: self.delay + answer.delay,
        }
    }

    fn respond(&self, call: &Call) -> Response<Body> {
        let (method, body) = (&call.method, call.body.as_ref());
        let (code, value) = match &self.reply {
            Reply::Object(object) => (200, object.clone()),
            Reply::Patched(object) => match call.patched(object) {
                Some(patched) => (200, patched),
                None => {
                    let refused = Answer::status(422, "Invalid", "the JSON patch does not apply");
                    return refused.respond(call);
                }
            },
            Reply::Echo => {
                let code = if method == Method::POST { 201 } else { 200 };
                (code, body.cloned().unwrap_or(Value::Null))
            }
            Reply::Raw { code, body } => (*code, body.clone()),
            Reply::Computed(compute) => return (compute.0)(call).respond(call),
            Reply::Status {
                code,
                reason,
                message,
            } => (
                *code,
                json!({
                    "apiVersion": "v1", "kind": "Status", "status": "Failure",
                    "code": code, "reason": reason, "message": message,
                }),
            ),
        };
        Response::builder()
            .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&value).unwrap_or_default()))
            .unwrap_or_else(|_| Response::new(Body::empty()))
    }
}

/// `text` with its `%XX` escapes decoded (as bytes, read back as UTF-8).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                i += 3;
            }
            None => {
                decoded.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// RFC 7386 JSON merge: `patch`'s members replace `target`'s, `null` removes one.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(object) = target {
        for (key, value) in members {
            if value.is_null() {
                object.remove(key);
            } else {
                merge(object.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// Answers for calls of one method (`None`: any) to one path (ending in `*`: a prefix), given
/// in turn; the last one keeps answering.
struct Route {
    method: Option<Method>,
    path: String,
    answers: VecDeque<Answer>,
}

impl Route {
    fn matches(&self, method: &Method, path: &str) -> bool {
        let path_matches = match self.path.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => path == self.path,
        };
        path_matches && self.method.as_ref().is_none_or(|m| m == method)
    }

    fn take(&mut self) -> Answer {
        match self.answers.len() {
            0 | 1 => self
                .answers
                .front()
                .cloned()
                .unwrap_or_else(Answer::not_found),
            _ => self.answers.pop_front().unwrap_or_else(Answer::not_found),
        }
    }
}

#[derive(Default)]
struct State {
    routes: Vec<Route>,
    calls: Vec<Call>,
}

/// The fake apiserver: cloned handles share its routes and calls.
#[derive(Clone, Default)]
pub struct FakeApi(Arc<Mutex<State>>);

impl FakeApi {
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers calls of `method` (`*`: any) to `path` (ending in `*`: every path it starts)
    /// with `answer`. The route added last wins where several match.
    pub fn on(self, method: &str, path: &str, answer: Answer) -> Self {
        self.on_each(method, path, [answer])
    }

    /// As [`FakeApi::on`], answering the matching calls with `answers` in turn; the last one
    /// keeps answering (e.g. a 503, then the object).
    pub fn on_each(
        self,
        method: &str,
        path: &str,
        answers: impl IntoIterator<Item = Answer>,
    ) -> Self {
        let method = (method != "*").then(|| {
            Method::from_bytes(method.as_bytes())
                .unwrap_or_else(|_| panic!("{method} is not an HTTP method"))
        });
        self.state().routes.push(Route {
            method,
            path: path.to_owned(),
            answers: answers.into_iter().collect(),
        });
        self
    }

    /// A client of this apiserver, its default namespace `default`.
    pub fn client(&self) -> Client {
        let api = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let api = api.clone();
            async move { Ok::<_, Infallible>(api.answer(request).await) }
        });
        Client::new(service, "default")
    }

    async fn answer(&self, request: Request<Body>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        let bytes = body
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .unwrap_or_default();
        let body = serde_json::from_slice::<Value>(&bytes).ok();
        let call = Call {
            method: parts.method.clone(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            body,
        };
        let answer = {
            let mut state = self.state();
            let answer = state
                .routes
                .iter_mut()
                .rev()
                .find(|route| route.matches(&call.method, &call.path))
                .map(Route::take)
                .unwrap_or_else(|| match call.method {
                    Method::POST => Answer::echo(),
                    _ => Answer::not_found(),
                });
            state.calls.push(call.clone());
            answer
        };
        // Computed and waited for outside the lock: other calls arrive meanwhile.
        let answer = answer.resolve(&call);
        if !answer.delay.is_zero() {
            tokio::time::sleep(answer.delay).await;
        }
        answer.respond(&call)
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.state().calls.clone()
    }

    /// Every call so far as `METHOD path`.
    pub fn lines(&self) -> Vec<String> {
        self.state().calls.iter().map(Call::line).collect()
    }

    /// The calls other than Events, as `METHOD path`: what a reconcile did to objects.
    pub fn object_lines(&self) -> Vec<String> {
        let state = self.state();
        state
            .calls
            .iter()
            .filter(|call| !call.is_event())
            .map(Call::line)
            .collect()
    }

    /// The calls other than Events, in order.
    pub fn object_calls(&self) -> Vec<Call> {
        let state = self.state();
        state
            .calls
            .iter()
            .filter(|call| !call.is_event())
            .cloned()
            .collect()
    }

    /// The calls of `method` to `path`, in order.
    pub fn calls_to(&self, method: &str, path: &str) -> Vec<Call> {
        let state = self.state();
        state
            .calls
            .iter()
            .filter(|call| call.method.as_str() == method && call.path == path)
            .cloned()
            .collect()
    }

    /// The notes of the Events created, in order.
    pub fn event_notes(&self) -> Vec<String> {
        let state = self.state();
        state
            .calls
            .iter()
            .filter(|call| call.is_new_event())
            .map(|call| call.field("/note").as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// The `reason`s of the Events created, in order.
    pub fn event_reasons(&self) -> Vec<String> {
        let state = self.state();
        state
            .calls
            .iter()
            .filter(|call| call.is_new_event())
            .map(|call| {
                call.field("/reason")
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    }

    /// Waits until no call has come for 100 ms (at most 5 s): what a reconcile sends in the
    /// background (Events) has gone out.
    pub async fn quiet(&self) {
        let mut seen = usize::MAX;
        for _ in 0..50 {
            let now = self.state().calls.len();
            if now == seen {
                return;
            }
            seen = now;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests;
