//! The caller's right to delete the target pod, asked of the apiserver by SubjectAccessReview
//! and remembered for a short while, as an aggregated apiserver's delegated authorizer does
//! (k8s.io/apiserver: 10 s for an allowed answer, 10 s for a denied one; our flags
//! `--authorization-cache-authorized-ttl` and `--authorization-cache-unauthorized-ttl`).
//!
//! A review asks first whether the caller may delete every pod of the namespace (a review
//! without a name) and only when that is not allowed whether it may delete the one pod. Under
//! RBAC, which has no denying rules, the first answer implies the second; it is the same for
//! every pod, so a burst of requests by one requester in one namespace costs one
//! SubjectAccessReview instead of one per request. Without it a burst of 100 requests waited
//! for 100 reviews from an apiserver busy with the burst itself: `cargo xtask bench webhooks`
//! measured the webhook one histogram bucket (5x) above a no-op webhook's (docs/bench/webhooks.md).
//! Concurrent reviews of the same question wait for one answer. An answer that could not be
//! had (the apiserver failed) is never remembered.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::core::admission::AdmissionRequest;
use kube::{Api, Client};
use tokio::sync::OnceCell;
use tokio::time::Instant;

/// Questions remembered at most; past this, answers that have expired are dropped first.
const REMEMBERED: usize = 4096;

/// Who asks: the admission request's user, as the SubjectAccessReview names it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Caller {
    pub username: Option<String>,
    pub uid: Option<String>,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Caller {
    pub fn of<K>(request: &AdmissionRequest<K>) -> Self
    where
        K: kube::Resource,
    {
        let user = &request.user_info;
        Caller {
            username: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone().unwrap_or_default(),
            extra: user.extra.clone().unwrap_or_default(),
        }
    }
}

/// One question: may `caller` delete pod `name` (every pod, for `None`) in `namespace`?
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Question {
    caller: Caller,
    namespace: String,
    name: Option<String>,
}

/// How long answers are remembered.
#[derive(Clone, Copy, Debug)]
pub struct Ttl {
    pub authorized: Duration,
    pub unauthorized: Duration,
}

impl Ttl {
    fn of(self, allowed: bool) -> Duration {
        if allowed {
            self.authorized
        } else {
            self.unauthorized
        }
    }
}

type Answer = Result<(bool, Instant), String>;

/// SubjectAccessReviews of pod deletes, with their answers remembered for [`Ttl`].
pub struct PodDeleteAccess {
    client: Client,
    ttl: Ttl,
    answers: Mutex<HashMap<Question, Arc<OnceCell<Answer>>>>,
}

impl PodDeleteAccess {
    pub fn new(client: Client, ttl: Ttl) -> Self {
        PodDeleteAccess {
            client,
            ttl,
            answers: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `caller` may delete pod `namespace/name`; the error says why the apiserver could
    /// not answer.
    pub async fn may_delete(
        &self,
        caller: &Caller,
        namespace: &str,
        name: &str,
    ) -> Result<bool, String> {
        let question = |name: Option<&str>| Question {
            caller: caller.clone(),
            namespace: namespace.to_owned(),
            name: name.map(str::to_owned),
        };
        if self.answer(question(None)).await? {
            return Ok(true);
        }
        self.answer(question(Some(name))).await
    }

    async fn answer(&self, question: Question) -> Result<bool, String> {
        let cell = self.cell(&question);
        let answer = cell
            .get_or_init(|| async {
                let allowed = review(&self.client, &question).await?;
                Ok((allowed, Instant::now() + self.ttl.of(allowed)))
            })
            .await
            .clone();
        if answer.is_err() {
            // Asked again by the next review, not remembered.
            let mut answers = self.answers.lock().expect("answers lock");
            if answers
                .get(&question)
                .is_some_and(|c| Arc::ptr_eq(c, &cell))
            {
                answers.remove(&question);
            }
        }
        answer.map(|(allowed, _)| allowed)
    }

    /// The question's cell: the one being answered or answered and not expired, else a new one.
    fn cell(&self, question: &Question) -> Arc<OnceCell<Answer>> {
        let now = Instant::now();
        let fresh = |cell: &Arc<OnceCell<Answer>>| match cell.get() {
            None => true,
            Some(Ok((_, expires))) => *expires > now,
            Some(Err(_)) => false,
        };
        let mut answers = self.answers.lock().expect("answers lock");
        if let Some(cell) = answers.get(question).filter(|cell| fresh(cell)) {
            return cell.clone();
        }
        if answers.len() >= REMEMBERED {
            answers.retain(|_, cell| fresh(cell));
        }
        let cell = Arc::new(OnceCell::new());
        answers.insert(question.clone(), cell.clone());
        cell
    }
}

async fn review(client: &Client, question: &Question) -> Result<bool, String> {
    let caller = &question.caller;
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: caller.username.clone(),
            groups: Some(caller.groups.clone()),
            uid: caller.uid.clone(),
            extra: Some(caller.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(question.namespace.clone()),
                verb: Some("delete".into()),
                resource: Some("pods".into()),
                name: question.name.clone(),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|error| error.to_string())?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}

#[cfg(test)]
mod tests;
