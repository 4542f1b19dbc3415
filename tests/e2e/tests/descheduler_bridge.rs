//! descheduler-bridge (KEP-1397) against the real control plane and the real descheduler
//! (`sigs.k8s.io/descheduler` v0.36, `tests/descheduler/`), run with
//! `--feature-gates=EvictionsInBackground=true` as ServiceAccount `<namespace>:descheduler`.
//!
//! Each test has its own kwok node, its own namespace, a bridge (webhook and controller) and an
//! evictionrequest-controller restricted to that namespace, and a descheduler policy that
//! considers only that node and only the pods the test labels `deschedule=yes` (PodLifeTime,
//! one second), so replacement pods of the Deployment are left alone. The interceptor is played
//! by the test through the public library, as users would.
//!
//! On Kubernetes' own `lifecycle.k8s.io/v1alpha1` API (the bridge's default on this control
//! plane): the bridge's EvictionRequest with requester `evictkit.io/descheduler-bridge`, a
//! responder of the pod's `spec.evictionResponders` and the imperative evictor completing it,
//! the bridge withdrawing by intent `Withdrawn` when the pod is gone or its TTL passes.
//!
//! Shown on the `evictkit.io` CRD: background evictions counted by the descheduler (`result="background"`), the
//! EvictionRequest with requester `descheduler-bridge.evictkit.io`, the pod marked in progress, an
//! interceptor and then the fallback eviction completing it; in-progress pods counted against
//! the descheduler's per-node limit across cycles and across a descheduler restart (no second
//! eviction of the same pod); TTL expiry releasing a stuck request; evictions by other users
//! (kubectl drain) and of pods that did not opt in passing untouched; dry-run and repeated
//! evictions without side effects; with `--intercept-interceptor-pods`, pods that only name
//! interceptors evacuated too.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use evictkit_api::eviction_request::EvictionRequest;
use evictkit_api::keys::{
    DESCHEDULER_BRIDGE_EVACUATION_ANSWERED, DESCHEDULER_BRIDGE_EVACUATION_STARTED,
    DESCHEDULER_EVICTION_IN_PROGRESS, DESCHEDULER_REQUEST_EVICT_ONLY, DESCHEDULER_REQUESTER,
    DESCHEDULER_REQUESTER_KEY, EVICTION_INTERCEPTORS,
};
use evictkit_core::eviction_request::crd::State;
use evictkit_core::eviction_request::upstream::{CONDITION_FAILED, INTENT_EVICTION, STATE_ACTIVE};
use evictkit_harness::TestEnv;
use evictkit_harness::component::{Component, free_port};
use evictkit_harness::descheduler::{Descheduler, Identity};
use evictkit_harness::objects;
use evictkit_harness::responder::{respond, target_state};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_harness::webhook::{Registration, rule};
use evictkit_runtime::clients::eviction_request::TargetPod;
use evictkit_runtime::clients::eviction_request::crd::InterceptorClient;
use evictkit_runtime::clients::eviction_request::upstream;
use k8s_openapi::api::admissionregistration::v1::MatchCondition;
use k8s_openapi::api::core::v1::{EvictionResponder, Pod};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest as LifecycleRequest};
use kube::api::{EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

const INTERCEPTOR: &str = "surge.example.com";
/// The pod's responder on the upstream API (`spec.evictionResponders`).
const RESPONDER: &str = "surge.example.com/migrate";
/// The label the descheduler policy selects: only pods the test marks are descheduled.
const TARGET: (&str, &str) = ("deschedule", "yes");
/// The descheduler's `result` when `maxNoOfPodsToEvictPerNode` refuses an eviction.
const NODE_LIMIT: &str = "maximum number of evicted pods per node reached";
/// Label of the node the test's pods run on (the other node stays empty).
const POD_NODE: &str = "evictkit.io/e2e-pods";

/// One test's world: its node, the descheduler's identity, the bridge and the controller.
struct Bridge {
    env: TestEnv,
    node: String,
    descheduler: Identity,
    bridge: Component,
    /// The bridge's flags, to start it again the same way.
    bridge_args: Vec<String>,
    _controller: Component,
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Starts everything but the descheduler on the `evictkit.io` CRD; `ttl` is the bridge's
/// `--max-evacuation-request-ttl`, `bridge_flags` any further flags of the bridge.
async fn setup(prefix: &str, ttl: &str, bridge_flags: &[&str]) -> Result<Bridge> {
    let flags = [&["--eviction-request-api=crd"], bridge_flags].concat();
    setup_on("crd", prefix, ttl, &flags).await
}

/// [`setup`] with the evictionrequest-controller on `--api=api`; the bridge's API is what
/// `bridge_flags` say (auto when they are silent).
async fn setup_on(api: &str, prefix: &str, ttl: &str, bridge_flags: &[&str]) -> Result<Bridge> {
    let env = TestEnv::new(prefix).await?;
    env.apply_crd("EvictionRequest").await?;
    // The descheduler skips its cycle with fewer than two nodes; the pods go to the first.
    let label = ("evictkit.io/e2e-node", env.namespace.as_str());
    let node = env
        .create_node(objects::node("node", &[label, (POD_NODE, "true")], vec![]))
        .await?
        .name_any();
    env.create_node(objects::node("spare", &[label], vec![]))
        .await?;
    let descheduler = env.service_account("descheduler", "cluster-admin").await?;

    let controller = start(
        &env,
        "evictionrequest-controller",
        &[
            "--roles=controller",
            &format!("--api={api}"),
            "--eviction-backoff-initial=200ms",
            "--eviction-backoff-max=1s",
        ],
    )
    .await?;

    let cert = env.serving_cert()?;
    let dir = env
        .cluster_dir()
        .join("logs/e2e")
        .join(format!("{}-bridge-certs", env.namespace));
    let (cert_file, key_file) = cert.write_to(&dir)?;
    let port = free_port()?;
    let mut bridge_args = vec![
        format!("--intercept-user={}", descheduler.username),
        format!("--max-evacuation-request-ttl={ttl}"),
        format!("--webhook-addr=127.0.0.1:{port}"),
        format!("--tls-cert-file={}", cert_file.display()),
        format!("--tls-key-file={}", key_file.display()),
    ];
    bridge_args.extend(bridge_flags.iter().map(|flag| flag.to_string()));
    let bridge = start(&env, "descheduler-bridge", &as_strs(&bridge_args)).await?;
    let user = descheduler.username.clone();
    env.register_validating_webhook_with(
        Registration {
            name: "descheduler-bridge".into(),
            url: format!("https://127.0.0.1:{port}/validate-eviction"),
            rules: vec![rule(&[""], &["v1"], &["pods/eviction"], &["CREATE"])],
            failure_policy: "Fail".into(),
        },
        &cert.ca_pem,
        |webhook| {
            // As the chart configures it: the apiserver calls the bridge for the descheduler only.
            webhook.side_effects = "NoneOnDryRun".into();
            webhook.match_conditions = Some(vec![MatchCondition {
                name: "descheduler".into(),
                expression: format!("request.userInfo.username == '{user}'"),
            }]);
        },
    )
    .await?;
    Ok(Bridge {
        env,
        node,
        descheduler,
        bridge,
        bridge_args,
        _controller: controller,
    })
}

/// Starts `binary` for the test's namespace only, without a Lease, and waits until it is ready.
async fn start(env: &TestEnv, binary: &str, args: &[&str]) -> Result<Component> {
    start_as(env, binary, args, env.kubeconfig()).await
}

/// [`start`] as the identity of `kubeconfig`.
async fn start_as(
    env: &TestEnv,
    binary: &str,
    args: &[&str],
    kubeconfig: &std::path::Path,
) -> Result<Component> {
    let namespace = format!("--namespace={}", env.namespace);
    let mut all = vec![namespace.as_str(), "--leader-elect=false"];
    all.extend_from_slice(args);
    let mut component = env.start_component_as(binary, &all, kubeconfig)?;
    component.wait_ready(DEFAULT_TIMEOUT).await?;
    Ok(component)
}

impl Bridge {
    /// Stops the bridge (SIGTERM) and starts it again with the same flags, at the same address.
    async fn restart_bridge(&mut self) -> Result<()> {
        ensure!(self.bridge.stop(), "the bridge exits on SIGTERM");
        self.bridge = start(&self.env, "descheduler-bridge", &as_strs(&self.bridge_args)).await?;
        Ok(())
    }

    /// [`Self::restart_bridge`] as `identity`, whose calls the audit log then tells apart.
    async fn restart_bridge_as(&mut self, identity: &Identity) -> Result<()> {
        ensure!(self.bridge.stop(), "the bridge exits on SIGTERM");
        let args = as_strs(&self.bridge_args);
        self.bridge =
            start_as(&self.env, "descheduler-bridge", &args, &identity.kubeconfig).await?;
        Ok(())
    }

    /// The LISTs of EvictionRequests (either API) `username` made in this namespace, per the
    /// audit log.
    fn request_lists_by(&self, username: &str) -> Result<usize> {
        Ok(self
            .env
            .audit_events()?
            .iter()
            .filter(|event| {
                event.user.username == username
                    && event.verb == "list"
                    && event.object_ref.as_ref().is_some_and(|o| {
                        o.resource.as_deref() == Some("evictionrequests") && o.subresource.is_none()
                    })
            })
            .count())
    }

    /// A Deployment of `replicas` pods on the test's node, annotated `request-evict-only` and
    /// naming the test's interceptor; returns its pods once Ready.
    async fn workload(&self, name: &str, replicas: i32) -> Result<Vec<Pod>> {
        self.workload_with(name, replicas, &[]).await
    }

    /// [`Self::workload`] whose pods name `responders` in `spec.evictionResponders` (the
    /// upstream API's interceptors).
    async fn workload_with(
        &self,
        name: &str,
        replicas: i32,
        responders: &[(&str, i32)],
    ) -> Result<Vec<Pod>> {
        let mut deployment = objects::deployment(name, replicas);
        let template = &mut deployment.spec.template;
        if !responders.is_empty() {
            template.spec.get_or_insert_default().eviction_responders = Some(
                responders
                    .iter()
                    .map(|(name, priority)| EvictionResponder {
                        name: (*name).into(),
                        priority: *priority,
                    })
                    .collect(),
            );
        }
        template.metadata.get_or_insert_default().annotations = Some(
            [
                (DESCHEDULER_REQUEST_EVICT_ONLY.to_owned(), String::new()),
                (EVICTION_INTERCEPTORS.to_owned(), INTERCEPTOR.to_owned()),
            ]
            .into(),
        );
        template.spec.get_or_insert_default().node_selector = Some(
            [
                (
                    "evictkit.io/e2e-node".to_owned(),
                    self.env.namespace.clone(),
                ),
                (POD_NODE.to_owned(), "true".to_owned()),
            ]
            .into(),
        );
        self.env.create(&deployment).await?;
        self.env
            .wait_for_ready_pods(&format!("app={name}"), replicas as usize)
            .await
    }

    /// Merges `annotations` into `pod`'s (a null value removes one).
    async fn annotate(&self, pod: &Pod, annotations: serde_json::Value) -> Result<()> {
        self.env
            .api::<Pod>()
            .patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
            )
            .await
            .with_context(|| format!("annotating pod {}", pod.name_any()))?;
        Ok(())
    }

    /// Labels `pod` for the descheduler's policy.
    async fn target(&self, pod: &Pod) -> Result<()> {
        self.env
            .api::<Pod>()
            .patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {TARGET.0: TARGET.1}}})),
            )
            .await
            .with_context(|| format!("labelling pod {}", pod.name_any()))?;
        Ok(())
    }

    /// The descheduler, every second, with `limits` merged into its policy.
    fn descheduler(&self, limits: serde_json::Value) -> Result<Descheduler> {
        let mut policy = json!({
            "apiVersion": "descheduler/v1alpha2",
            "kind": "DeschedulerPolicy",
            "nodeSelector": format!("evictkit.io/e2e-node={}", self.env.namespace),
            "profiles": [{
                "name": "e2e",
                "pluginConfig": [{
                    "name": "PodLifeTime",
                    "args": {
                        "maxPodLifeTimeSeconds": 1,
                        "namespaces": {"include": [self.env.namespace]},
                        "labelSelector": {"matchLabels": {TARGET.0: TARGET.1}},
                    },
                }],
                "plugins": {"deschedule": {"enabled": ["PodLifeTime"]}},
            }],
        });
        if let (Some(policy), Some(limits)) = (policy.as_object_mut(), limits.as_object()) {
            policy.extend(limits.clone());
        }
        self.env
            .start_descheduler(&self.descheduler, &serde_json::to_string(&policy)?, "1s")
    }

    /// The descheduler's `descheduler_pods_evicted_total{result}` in this namespace, once it
    /// reaches `at_least`.
    async fn wait_evicted(
        &self,
        descheduler: &Descheduler,
        result: &str,
        at_least: f64,
    ) -> Result<f64> {
        let labels = [
            &format!("result=\"{result}\"") as &str,
            &format!("namespace=\"{}\"", self.env.namespace),
        ];
        let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
        loop {
            let value = descheduler.pods_evicted(&labels).await.unwrap_or(0.0);
            if value >= at_least {
                return Ok(value);
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "descheduler_pods_evicted_total{{result={result:?}}} is {value}, not {at_least}; descheduler log:\n{}\nbridge log:\n{}",
                descheduler.log_tail(30),
                self.bridge.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn wait_request(
        &self,
        pod: &Pod,
        what: &str,
        condition: impl Fn(&EvictionRequest) -> bool,
    ) -> Result<EvictionRequest> {
        wait::wait_for(
            &self.env.api::<EvictionRequest>(),
            &uid(pod),
            DEFAULT_TIMEOUT,
            what,
            condition,
        )
        .await
    }

    async fn wait_pod(
        &self,
        pod: &Pod,
        what: &str,
        condition: impl Fn(&Pod) -> bool,
    ) -> Result<Pod> {
        wait::wait_for(
            &self.env.api::<Pod>(),
            &pod.name_any(),
            DEFAULT_TIMEOUT,
            what,
            condition,
        )
        .await
    }

    /// The bridge's `lifecycle.k8s.io` EvictionRequest of `pod`, once it satisfies `condition`.
    async fn wait_lifecycle_request(
        &self,
        pod: &Pod,
        what: &str,
        condition: impl Fn(&LifecycleRequest) -> bool,
    ) -> Result<LifecycleRequest> {
        wait::wait_for(
            &self.env.api::<LifecycleRequest>(),
            &upstream::request_name(&pod.name_any(), DESCHEDULER_REQUESTER_KEY),
            DEFAULT_TIMEOUT,
            what,
            condition,
        )
        .await
    }

    /// The pod's Eviction (lifecycle.k8s.io), once it satisfies `condition`.
    async fn wait_eviction(
        &self,
        pod: &Pod,
        what: &str,
        condition: impl Fn(&Eviction) -> bool,
    ) -> Result<Eviction> {
        let api = self.env.api::<Eviction>();
        let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
        loop {
            let evictions = api.list(&ListParams::default()).await?.items;
            let of_pod: Vec<&Eviction> = evictions
                .iter()
                .filter(|e| {
                    e.spec.target.pod.as_ref().map(|p| p.uid.as_str()) == Some(uid(pod).as_str())
                })
                .collect();
            if let Some(eviction) = of_pod.iter().find(|e| condition(e)) {
                return Ok((*eviction).clone());
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for the Eviction of pod {} to be {what}: {}",
                pod.name_any(),
                of_pod
                    .iter()
                    .map(|e| wait::describe(Some(*e)))
                    .collect::<Vec<_>>()
                    .join("\n---\n")
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits for a Warning Event `EvacuationExpired` on the EvictionRequest `request`.
    /// Waits until no Eviction of `pod` is left.
    async fn wait_no_eviction(&self, pod: &Pod) -> Result<()> {
        let api = self.env.api::<Eviction>();
        let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
        loop {
            let evictions = api.list(&ListParams::default()).await?.items;
            let left: Vec<String> = evictions
                .iter()
                .filter(|e| {
                    e.spec.target.pod.as_ref().map(|p| p.uid.as_str()) == Some(uid(pod).as_str())
                })
                .map(ResourceExt::name_any)
                .collect();
            if left.is_empty() {
                return Ok(());
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "Evictions of pod {} left: {left:?}",
                pod.name_any()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until an Event with `reason` regarding the object named `name` exists.
    async fn wait_event(&self, name: &str, reason: &str) -> Result<()> {
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(self.env.client.clone(), &self.env.namespace);
        let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
        while !events
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
        {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "no {reason} Event regarding {name}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    async fn wait_expired_event(&self, request: &str) -> Result<()> {
        let events: kube::Api<k8s_openapi::api::events::v1::Event> =
            kube::Api::namespaced(self.env.client.clone(), &self.env.namespace);
        let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
        while !events
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("EvacuationExpired")
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(request)
            })
        {
            ensure!(
                tokio::time::Instant::now() < deadline,
                "no EvacuationExpired Warning on {request}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// Fails with `why` if `pod` has an EvictionRequest.
    async fn ensure_no_request(&self, pod: &Pod, why: &str) -> Result<()> {
        let request = self.env.api::<EvictionRequest>().get_opt(&uid(pod)).await?;
        ensure!(request.is_none(), "{why}");
        Ok(())
    }

    /// Eviction calls the descheduler made in this namespace (any answer), per the audit log.
    fn descheduler_evictions(&self) -> Result<Vec<String>> {
        Ok(self
            .env
            .audit_events()?
            .into_iter()
            .filter(|event| {
                event.user.username == self.descheduler.username
                    && event
                        .object_ref
                        .as_ref()
                        .and_then(|o| o.subresource.as_deref())
                        == Some("eviction")
            })
            .filter_map(|event| event.object_ref?.name)
            .collect())
    }

    /// The bridge's `pod_evacuations{result}`.
    fn evacuations(&self, result: &str) -> Result<f64> {
        Ok(self
            .bridge
            .metric_value(&format!("pod_evacuations{{result=\"{result}\"}}"))?
            .unwrap_or(0.0))
    }
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn requesters(request: &EvictionRequest) -> Vec<&str> {
    request
        .spec
        .requesters
        .iter()
        .map(|r| r.name.as_str())
        .collect()
}

/// The eviction answer as the client sees it: Ok for 201, else the apiserver's status.
async fn evict(client: &Client, pod: &Pod, dry_run: bool) -> Result<Result<(), (u16, String)>> {
    let pods: kube::Api<Pod> =
        kube::Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let params = EvictParams {
        post_options: PostParams {
            dry_run,
            ..PostParams::default()
        },
        ..EvictParams::default()
    };
    match pods.evict(&pod.name_any(), &params).await {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(status)) => Ok(Err((status.code, status.message))),
        Err(error) => Err(error.into()),
    }
}

/// The whole flow: the descheduler evicts in background, the EvictionRequest carries the
/// eviction to the interceptor and then to the fallback eviction, and the bridge lets go.
#[tokio::test]
async fn background_eviction_through_an_eviction_request() -> Result<()> {
    let t = setup("desched-flow", "1h", &[]).await?;
    let pods = t.workload("web", 1).await?;
    let pod = &pods[0];
    t.target(pod).await?;
    let descheduler = t.descheduler(json!({}))?;

    t.wait_evicted(&descheduler, "background", 1.0).await?;
    let request = t
        .wait_request(pod, "requested by the descheduler", |r| {
            requesters(r) == [DESCHEDULER_REQUESTER]
        })
        .await?;
    let marked = t
        .wait_pod(pod, "marked eviction-in-progress", |p| {
            annotation(p, DESCHEDULER_EVICTION_IN_PROGRESS).is_some()
        })
        .await?;
    ensure!(
        annotation(&marked, DESCHEDULER_EVICTION_IN_PROGRESS) == Some(uid(pod).as_str()),
        "the mark names the request: {:?}",
        marked.metadata.annotations
    );
    ensure!(
        annotation(&marked, DESCHEDULER_BRIDGE_EVACUATION_STARTED).is_some(),
        "the evacuation's start is recorded"
    );
    // The start of the descheduler's own cache TTL, from which the controller refreshes the
    // pod.
    ensure!(
        annotation(&marked, DESCHEDULER_BRIDGE_EVACUATION_ANSWERED).is_some(),
        "the 429's time is recorded: {:?}",
        marked.metadata.annotations
    );
    ensure!(
        objects::pod_ready(&marked),
        "the pod is not evicted by the descheduler"
    );
    ensure!(
        request.spec.target.pod.as_ref().map(|p| p.name.as_str()) == Some(pod.name_any().as_str()),
        "the request targets the pod"
    );
    ensure!(t.evacuations("requested")? == 1.0);

    // The interceptor gets the request first, works, and completes.
    let surge = InterceptorClient::new(t.env.client.clone(), INTERCEPTOR);
    let request = t
        .wait_request(pod, "handed to the interceptor", |r| surge.is_active(r))
        .await?;
    ensure!(request.metadata.name.as_deref() == Some(uid(pod).as_str()));
    let request = surge
        .heartbeat(&request, "surge pod starting", None)
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        t.env.api::<Pod>().get_opt(&pod.name_any()).await?.is_some(),
        "the pod stays while its interceptor works"
    );
    surge.complete(&request, "surge pod ready").await?;

    // The fallback eviction (the controller's identity, not the descheduler's) is not
    // intercepted: the pod goes.
    wait::wait_for_deletion(&t.env.api::<Pod>(), &pod.name_any(), DEFAULT_TIMEOUT).await?;
    let request = t
        .wait_request(pod, "Evicted, the bridge withdrawn", |r| {
            State::of(r) == State::Evicted && r.spec.requesters.is_empty()
        })
        .await?;
    ensure!(State::of(&request) == State::Evicted);
    t.wait_evicted(&descheduler, "success", 1.0).await?;
    ensure!(t.evacuations("evicted")? == 1.0);
    ensure!(
        t.descheduler_evictions()? == [pod.name_any()],
        "one eviction by the descheduler: {:?}",
        t.descheduler_evictions()?
    );
    t.env.ensure_no_invalid_writes()
}

/// A pod whose EvictionRequest was Canceled by validation (here a malformed
/// interceptor annotation) is not requested again every descheduler cycle: the bridge answers
/// later cycles' evictions 403 with the reason, the request stays the one that was refused (not
/// deleted and made again), and the pod stays unmarked and running.
#[tokio::test]
async fn a_refused_pod_is_not_requested_again_every_cycle() -> Result<()> {
    let t = setup("desched-refused", "1h", &[]).await?;
    let pods = t.workload("web", 1).await?;
    let pod = &pods[0];
    // No pod webhook runs here, so the typo reaches the controller as it would on a cluster
    // where the pod was written before the webhook was installed.
    t.annotate(pod, json!({EVICTION_INTERCEPTORS: "Not_A_Name"}))
        .await?;
    t.target(pod).await?;
    let descheduler = t.descheduler(json!({}))?;
    let refused = t
        .wait_request(pod, "Canceled by validation", |r| {
            State::of(r) == State::Canceled
        })
        .await?;
    // Two more cycles' evictions after the refusal (the descheduler runs every second).
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    while t.evacuations("refused")? < 2.0 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the bridge refused {} evictions, not 2; descheduler log:\n{}\nbridge log:\n{}",
            t.evacuations("refused")?,
            descheduler.log_tail(30),
            t.bridge.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let now = t
        .env
        .api::<EvictionRequest>()
        .get(&uid(pod))
        .await
        .context("the refused request is kept")?;
    ensure!(
        now.metadata.uid == refused.metadata.uid && State::of(&now) == State::Canceled,
        "the refused request was made again ({:?} -> {:?}, {:?})",
        refused.metadata.uid,
        now.metadata.uid,
        State::of(&now)
    );
    ensure!(
        t.evacuations("requested")? == 1.0,
        "requested {} times",
        t.evacuations("requested")?
    );
    let (code, message) = evict(&t.descheduler.client().await?, pod, false)
        .await?
        .err()
        .context("the descheduler's eviction of a refused pod must not pass")?;
    ensure!(
        code == 403 && message.contains("Not_A_Name"),
        "answered {code}: {message}"
    );
    let current = t.env.api::<Pod>().get(&pod.name_any()).await?;
    ensure!(
        annotation(&current, DESCHEDULER_EVICTION_IN_PROGRESS).is_none(),
        "the pod is still marked in progress: {:?}",
        current.metadata.annotations
    );
    t.env.ensure_no_invalid_writes()
}

/// Pods evicted in background count against `maxNoOfPodsToEvictPerNode` in every later cycle,
/// and after a descheduler restart (rebuilt from the in-progress mark): the second pod is never
/// evicted, the first never twice.
#[tokio::test]
async fn in_progress_pods_count_against_the_node_limit() -> Result<()> {
    let t = setup("desched-limit", "1h", &[]).await?;
    let pods = t.workload("web", 2).await?;
    ensure!(
        pods.iter()
            .all(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()) == Some(&t.node)),
        "both pods on the one node the limit is about"
    );
    for pod in &pods {
        t.target(pod).await?;
    }
    let limits = json!({"maxNoOfPodsToEvictPerNode": 1});
    let descheduler = t.descheduler(limits.clone())?;
    t.wait_evicted(&descheduler, "background", 1.0).await?;
    // Several one-second cycles.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let evicted = t.descheduler_evictions()?;
    ensure!(
        evicted.len() == 1,
        "one eviction across cycles: {evicted:?}; log:\n{}",
        descheduler.log_tail(30)
    );
    // The other pod is nominated every cycle and refused by the limit.
    t.wait_evicted(&descheduler, NODE_LIMIT, 2.0).await?;
    drop(descheduler);

    // A new descheduler knows nothing but what the pods say.
    let descheduler = t.descheduler(limits)?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure!(
        descheduler.pods_evicted(&["result=\"background\""]).await? == 0.0,
        "nothing evicted after the restart; log:\n{}",
        descheduler.log_tail(30)
    );
    // Rebuilt from the pod's eviction-in-progress mark: the limit is still taken.
    t.wait_evicted(&descheduler, NODE_LIMIT, 2.0).await?;
    let after = t.descheduler_evictions()?;
    ensure!(after == evicted, "still one eviction: {after:?}");
    let requests = t
        .env
        .api::<EvictionRequest>()
        .list(&ListParams::default())
        .await?;
    ensure!(requests.items.len() == 1, "one EvictionRequest");
    t.env.ensure_no_invalid_writes()
}

/// After `--max-evacuation-request-ttl` the bridge withdraws and clears the mark; the
/// descheduler then asks again, and the request is made afresh.
#[tokio::test]
async fn ttl_expiry_releases_a_stuck_request() -> Result<()> {
    let t = setup("desched-ttl", "4s", &[]).await?;
    let pods = t.workload("web", 1).await?;
    let pod = &pods[0];
    t.target(pod).await?;
    let descheduler = t.descheduler(json!({}))?;
    let first = t
        .wait_request(pod, "requested", |r| {
            requesters(r) == [DESCHEDULER_REQUESTER]
        })
        .await?;
    // The interceptor never answers. The descheduler counts the pod as in progress and stops
    // (so the release below is seen before it asks again).
    t.wait_pod(pod, "marked", |p| {
        annotation(p, DESCHEDULER_EVICTION_IN_PROGRESS).is_some()
    })
    .await?;
    drop(descheduler);

    let released = t
        .wait_pod(pod, "released by the TTL", |p| {
            annotation(p, DESCHEDULER_EVICTION_IN_PROGRESS).is_none()
                && annotation(p, DESCHEDULER_BRIDGE_EVACUATION_STARTED).is_none()
                && annotation(p, DESCHEDULER_BRIDGE_EVACUATION_ANSWERED).is_none()
        })
        .await?;
    ensure!(objects::pod_ready(&released), "the pod itself stays");
    // The bridge was the only requester: withdrawn, the request is canceled.
    t.wait_request(pod, "canceled", |r| {
        r.spec.requesters.is_empty() && State::of(r) == State::Canceled
    })
    .await?;
    ensure!(t.evacuations("expired")? == 1.0);
    // The operator sees why on the request: a Warning Event naming the TTL.
    t.wait_expired_event(&first.name_any()).await?;

    // Released: the descheduler asks again and the bridge requests afresh (the canceled
    // request is replaced by a new object of the same name).
    let descheduler = t.descheduler(json!({}))?;
    t.wait_evicted(&descheduler, "background", 1.0).await?;
    let second = t
        .wait_request(pod, "requested afresh", |r| {
            r.metadata.uid != first.metadata.uid && requesters(r) == [DESCHEDULER_REQUESTER]
        })
        .await?;
    ensure!(State::of(&second) == State::InProgress);
    t.wait_pod(pod, "marked again", |p| {
        annotation(p, DESCHEDULER_EVICTION_IN_PROGRESS).is_some()
    })
    .await?;
    // At least one eviction per run: a later cycle of the second run may ask again before its
    // informer sees the new mark (the bridge joins such an ask, see the interceptor test).
    let evictions = t.descheduler_evictions()?;
    ensure!(
        evictions.len() >= 2 && evictions.iter().all(|name| *name == pod.name_any()),
        "the same pod evicted again after the TTL: {evictions:?}"
    );
    t.env.ensure_no_invalid_writes()
}

/// A restarted bridge rebuilds from the API: the TTL runs from the evacuation's start written on
/// the pod, not from the restart, and the stuck request is released at once.
#[tokio::test]
async fn a_restarted_bridge_keeps_the_evacuation_start() -> Result<()> {
    let ttl = Duration::from_secs(10);
    let mut t = setup("desched-restart", "10s", &[]).await?;
    let pods = t.workload("web", 1).await?;
    let pod = &pods[0];
    t.target(pod).await?;
    let descheduler = t.descheduler(json!({}))?;
    let marked = t
        .wait_pod(pod, "marked", |p| {
            annotation(p, DESCHEDULER_BRIDGE_EVACUATION_STARTED).is_some()
        })
        .await?;
    drop(descheduler);
    let started: jiff::Timestamp = annotation(&marked, DESCHEDULER_BRIDGE_EVACUATION_STARTED)
        .unwrap_or_default()
        .parse()?;

    // Down for the whole TTL, then up again.
    ensure!(t.bridge.stop(), "the bridge exits on SIGTERM");
    let expires = started + jiff::SignedDuration::try_from(ttl)?;
    let wait = expires.duration_since(jiff::Timestamp::now());
    tokio::time::sleep(Duration::try_from(wait).unwrap_or_default() + Duration::from_millis(500))
        .await;
    ensure!(
        annotation(
            &t.env.api::<Pod>().get(&pod.name_any()).await?,
            DESCHEDULER_EVICTION_IN_PROGRESS
        )
        .is_some(),
        "nothing released while the bridge is down"
    );
    t.restart_bridge().await?;
    let restarted = tokio::time::Instant::now();
    t.wait_pod(pod, "released", |p| {
        annotation(p, DESCHEDULER_EVICTION_IN_PROGRESS).is_none()
    })
    .await?;
    ensure!(
        restarted.elapsed() < ttl / 2,
        "released {:?} after the restart: the TTL was counted from the restart",
        restarted.elapsed()
    );
    ensure!(t.evacuations("expired")? == 1.0);
    t.wait_request(pod, "withdrawn", |r| r.spec.requesters.is_empty())
        .await?;
    t.env.ensure_no_invalid_writes()
}

/// kubectl-drain-style evictions by another user, and the descheduler's evictions of pods that
/// did not opt in, pass untouched; dry-run and repeated evictions write nothing new.
#[tokio::test]
async fn other_users_and_other_pods_pass_untouched() -> Result<()> {
    let t = setup("desched-pass", "1h", &[]).await?;
    let pods = t.workload("web", 3).await?;
    let as_descheduler = t.descheduler.client().await?;

    // Dry run by the descheduler: the 429 it would get, and no request, no mark.
    let answer = evict(&as_descheduler, &pods[0], true).await?;
    let Err((429, message)) = &answer else {
        anyhow::bail!("a dry-run eviction is answered 429, got {answer:?}");
    };
    ensure!(
        message.contains(&format!(
            "Eviction triggered evacuation of pod {}/{} via EvictionRequest {}",
            t.env.namespace,
            pods[0].name_any(),
            uid(&pods[0])
        )),
        "{message}"
    );
    t.ensure_no_request(&pods[0], "no request on dry run")
        .await?;

    // Twice for real: one request, one requester, the first start kept.
    ensure!(matches!(
        evict(&as_descheduler, &pods[0], false).await?,
        Err((429, _))
    ));
    let marked = t
        .wait_pod(&pods[0], "marked", |p| {
            annotation(p, DESCHEDULER_BRIDGE_EVACUATION_STARTED).is_some()
        })
        .await?;
    ensure!(matches!(
        evict(&as_descheduler, &pods[0], false).await?,
        Err((429, _))
    ));
    let again = t.env.api::<Pod>().get(&pods[0].name_any()).await?;
    ensure!(
        annotation(&again, DESCHEDULER_BRIDGE_EVACUATION_STARTED)
            == annotation(&marked, DESCHEDULER_BRIDGE_EVACUATION_STARTED),
        "a repeated eviction keeps the start"
    );
    let request = t.wait_request(&pods[0], "requested", |_| true).await?;
    ensure!(requesters(&request) == [DESCHEDULER_REQUESTER]);
    ensure!(t.evacuations("requested")? == 1.0 && t.evacuations("repeated")? == 1.0);

    // A drain by the admin: evicted at once, no request.
    ensure!(evict(&t.env.client, &pods[1], false).await? == Ok(()));
    wait::wait_for_deletion(&t.env.api::<Pod>(), &pods[1].name_any(), DEFAULT_TIMEOUT).await?;
    t.ensure_no_request(&pods[1], "no request for a drain")
        .await?;

    // The descheduler's eviction of a pod without request-evict-only: evicted at once.
    let plain = &pods[2];
    t.annotate(plain, json!({DESCHEDULER_REQUEST_EVICT_ONLY: null}))
        .await?;
    // The bridge decides from its pod cache, which sees the annotation go a moment later: wait
    // for it with dry runs, which write nothing and are answered as the eviction will be.
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    while evict(&as_descheduler, plain, true).await? != Ok(()) {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the bridge still intercepts {} after its annotation went",
            plain.name_any()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ensure!(evict(&as_descheduler, plain, false).await? == Ok(()));
    wait::wait_for_deletion(&t.env.api::<Pod>(), &plain.name_any(), DEFAULT_TIMEOUT).await?;
    t.ensure_no_request(plain, "no request for a pod that did not opt in")
        .await?;
    t.env.ensure_no_invalid_writes()
}

/// With `--intercept-interceptor-pods`, a pod that names eviction interceptors but lacks
/// `request-evict-only` is evacuated through an EvictionRequest too. The descheduler does not
/// read that 429 as "in background", so it asks again every cycle; each ask joins the same
/// request. A pod with neither annotation is still evicted at once.
#[tokio::test]
async fn interceptor_pods_are_evacuated_with_the_flag() -> Result<()> {
    let t = setup("desched-icpt", "1h", &["--intercept-interceptor-pods"]).await?;
    let pods = t.workload("web", 2).await?;
    let (intercepted, plain) = (&pods[0], &pods[1]);
    let drop_annotations = |keys: &[&str]| {
        let annotations: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|key| (key.to_string(), serde_json::Value::Null))
            .collect();
        Patch::Merge(json!({"metadata": {"annotations": annotations}}))
    };
    let api = t.env.api::<Pod>();
    api.patch(
        &intercepted.name_any(),
        &PatchParams::default(),
        &drop_annotations(&[DESCHEDULER_REQUEST_EVICT_ONLY]),
    )
    .await?;
    api.patch(
        &plain.name_any(),
        &PatchParams::default(),
        &drop_annotations(&[DESCHEDULER_REQUEST_EVICT_ONLY, EVICTION_INTERCEPTORS]),
    )
    .await?;
    t.target(intercepted).await?;
    t.target(plain).await?;
    let descheduler = t.descheduler(json!({}))?;

    // The plain pod is evicted by the descheduler itself.
    wait::wait_for_deletion(&api, &plain.name_any(), DEFAULT_TIMEOUT).await?;
    t.wait_evicted(&descheduler, "success", 1.0).await?;
    t.ensure_no_request(plain, "no request for a pod that names no interceptor")
        .await?;

    // The interceptor pod gets a request with the descheduler as its one requester, and its
    // mark; the descheduler's later asks join that request.
    let request = t
        .wait_request(intercepted, "requested by the descheduler", |r| {
            requesters(r) == [DESCHEDULER_REQUESTER]
        })
        .await?;
    ensure!(
        request.spec.target.pod.as_ref().map(|p| p.name.as_str())
            == Some(intercepted.name_any().as_str()),
        "the request targets the interceptor pod"
    );
    t.wait_pod(intercepted, "marked eviction-in-progress", |p| {
        annotation(p, DESCHEDULER_EVICTION_IN_PROGRESS) == Some(uid(intercepted).as_str())
    })
    .await?;
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    while t.evacuations("repeated")? < 1.0 {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the descheduler asks again in its next cycle; descheduler log:\n{}",
            descheduler.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    ensure!(t.evacuations("requested")? == 1.0, "one request, joined");
    let request = t
        .env
        .api::<EvictionRequest>()
        .get(&uid(intercepted))
        .await?;
    ensure!(requesters(&request) == [DESCHEDULER_REQUESTER]);
    let asks = t
        .descheduler_evictions()?
        .into_iter()
        .filter(|name| *name == intercepted.name_any())
        .count();
    ensure!(asks >= 2, "the descheduler asked {asks} times");
    ensure!(
        objects::pod_ready(&api.get(&intercepted.name_any()).await?),
        "the interceptor pod is not evicted by the descheduler"
    );
    t.env.ensure_no_invalid_writes()
}

fn lifecycle_condition(request: &LifecycleRequest, kind: &str, status: &str) -> bool {
    request
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == kind && c.status == status)
}

/// The pod's responder completes its part, as a real responder writes it: its entry in the
/// Eviction's `.status.responders` by server-side apply under its own field manager.
async fn complete_responder(t: &Bridge, eviction: &Eviction) -> Result<()> {
    respond(
        &t.env,
        eviction,
        RESPONDER,
        "surge-example-com-migrate",
        "surge pod ready",
        true,
    )
    .await
    .map(drop)
}

/// The whole flow on Kubernetes' own API, the bridge's API chosen by discovery: the descheduler
/// evicts in background, the bridge's EvictionRequest (requester
/// `evictkit.io/descheduler-bridge`) carries the eviction to the pod's responder and then to
/// the imperative evictor, and the bridge withdraws once TargetEvicted, then deletes its request;
/// the Eviction goes with it.
#[tokio::test]
async fn background_eviction_through_the_lifecycle_api() -> Result<()> {
    // setup_on starts the controller on lifecycle.k8s.io: ask the cluster first.
    if TestEnv::new("desched-lc-probe")
        .await?
        .skip_without_lifecycle_api()
        .await?
    {
        return Ok(());
    }
    let t = setup_on("lifecycle", "desched-lc-flow", "1h", &[]).await?;
    let pods = t.workload_with("web", 1, &[(RESPONDER, 10000)]).await?;
    let pod = &pods[0];
    t.target(pod).await?;
    let descheduler = t.descheduler(json!({}))?;

    t.wait_evicted(&descheduler, "background", 1.0).await?;
    let request = t
        .wait_lifecycle_request(pod, "requested by the descheduler", |r| {
            r.spec.intent == INTENT_EVICTION
        })
        .await?;
    ensure!(
        request.spec.requester == DESCHEDULER_REQUESTER_KEY,
        "requester {}",
        request.spec.requester
    );
    ensure!(
        request.spec.target.pod.as_ref().map(|p| p.uid.as_str()) == Some(uid(pod).as_str()),
        "the request targets the pod"
    );
    ensure!(
        t.bridge.log_tail(400).contains("Lifecycle"),
        "discovery chose lifecycle.k8s.io; log:\n{}",
        t.bridge.log_tail(40)
    );
    let marked = t
        .wait_pod(pod, "marked eviction-in-progress", |p| {
            annotation(p, DESCHEDULER_EVICTION_IN_PROGRESS).is_some()
        })
        .await?;
    ensure!(
        annotation(&marked, DESCHEDULER_EVICTION_IN_PROGRESS) == Some(request.name_any().as_str()),
        "the mark names the request: {:?}",
        marked.metadata.annotations
    );
    ensure!(
        objects::pod_ready(&marked),
        "not evicted by the descheduler"
    );
    ensure!(t.evacuations("requested")? == 1.0);
    ensure!(
        t.env
            .api::<EvictionRequest>()
            .list(&ListParams::default())
            .await?
            .items
            .is_empty(),
        "no evictkit.io EvictionRequest"
    );

    // The pod's responder first; it works, then completes; the imperative evictor evicts.
    let eviction = t
        .wait_eviction(pod, "handed to the responder", |e| {
            target_state(e, RESPONDER).as_deref() == Some(STATE_ACTIVE)
        })
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        t.env.api::<Pod>().get_opt(&pod.name_any()).await?.is_some(),
        "the pod stays while its responder works"
    );
    complete_responder(&t, &eviction).await?;
    wait::wait_for_deletion(&t.env.api::<Pod>(), &pod.name_any(), DEFAULT_TIMEOUT).await?;
    // TargetEvicted, the bridge withdrawn (its outcome counted), its request deleted and the
    // Eviction with it (garbage collector).
    t.wait_evicted(&descheduler, "success", 1.0).await?;
    let requests = t.env.api::<LifecycleRequest>();
    wait::wait_for_deletion(&requests, &request.name_any(), DEFAULT_TIMEOUT).await?;
    let evictions = t.env.api::<Eviction>();
    wait::wait_for_deletion(&evictions, &eviction.name_any(), DEFAULT_TIMEOUT).await?;
    ensure!(t.evacuations("evicted")? == 1.0);
    t.wait_event(&eviction.name_any(), "Evicting").await?;
    ensure!(
        t.descheduler_evictions()? == [pod.name_any()],
        "one eviction by the descheduler: {:?}",
        t.descheduler_evictions()?
    );
    t.env.ensure_no_invalid_writes()
}

/// On Kubernetes' own API, after `--max-evacuation-request-ttl` the bridge withdraws by intent
/// `Withdrawn` (the Eviction is canceled: it was the only requester), clears the mark and then
/// deletes its request (the Eviction goes with it); the descheduler asks again through a new
/// request.
#[tokio::test]
async fn ttl_expiry_withdraws_the_lifecycle_request() -> Result<()> {
    // setup_on starts the controller on lifecycle.k8s.io: ask the cluster first.
    if TestEnv::new("desched-lc-probe")
        .await?
        .skip_without_lifecycle_api()
        .await?
    {
        return Ok(());
    }
    let t = setup_on(
        "lifecycle",
        "desched-lc-ttl",
        "4s",
        &["--eviction-request-api=lifecycle"],
    )
    .await?;
    // The responder never answers.
    let pods = t.workload_with("web", 1, &[(RESPONDER, 10000)]).await?;
    let pod = &pods[0];
    t.target(pod).await?;
    let descheduler = t.descheduler(json!({}))?;
    let first = t
        .wait_lifecycle_request(pod, "requested", |r| r.spec.intent == INTENT_EVICTION)
        .await?;
    t.wait_pod(pod, "marked", |p| {
        annotation(p, DESCHEDULER_EVICTION_IN_PROGRESS).is_some()
    })
    .await?;
    drop(descheduler);

    let released = t
        .wait_pod(pod, "released by the TTL", |p| {
            annotation(p, DESCHEDULER_EVICTION_IN_PROGRESS).is_none()
                && annotation(p, DESCHEDULER_BRIDGE_EVACUATION_STARTED).is_none()
                && annotation(p, DESCHEDULER_BRIDGE_EVACUATION_ANSWERED).is_none()
        })
        .await?;
    ensure!(objects::pod_ready(&released), "the pod itself stays");
    // Withdrawn, the Eviction canceled, then both gone.
    let requests = t.env.api::<LifecycleRequest>();
    wait::wait_for_deletion(&requests, &first.name_any(), DEFAULT_TIMEOUT).await?;
    t.wait_no_eviction(pod).await?;
    ensure!(t.evacuations("expired")? == 1.0);
    t.wait_expired_event(&first.name_any()).await?;

    // Released: the descheduler asks again, through a new request and a new Eviction.
    let descheduler = t.descheduler(json!({}))?;
    t.wait_evicted(&descheduler, "background", 1.0).await?;
    let second = t
        .wait_lifecycle_request(pod, "requested again", |r| {
            r.spec.intent == INTENT_EVICTION && !lifecycle_condition(r, CONDITION_FAILED, "True")
        })
        .await?;
    ensure!(second.metadata.uid != first.metadata.uid, "a new request");
    t.wait_pod(pod, "marked again", |p| {
        annotation(p, DESCHEDULER_EVICTION_IN_PROGRESS).is_some()
    })
    .await?;
    t.env.ensure_no_invalid_writes()
}

/// Another requester's key on Kubernetes' own API (a drain tool's).
const DRAIN: &str = "example.com/drain";

/// KEP-1397: a pod that another requester's EvictionRequest is evicting (here a drain's, the
/// pod's responder at work) is "already getting evacuated". The descheduler's eviction of it
/// is answered 429 as in background, naming that request, also for a pod without
/// `request-evict-only`, and never let through; the bridge does not join. When the drain
/// withdraws, nothing of the bridge's keeps the eviction going: the descheduler's next eviction
/// of the pod that did not opt in goes through. A `request-evict-only` pod under the drain's
/// request counts against the descheduler's per-node limit.
#[tokio::test]
async fn pods_another_requester_evicts_are_already_getting_evacuated() -> Result<()> {
    // setup_on starts the controller on lifecycle.k8s.io: ask the cluster first.
    if TestEnv::new("desched-lc-probe")
        .await?
        .skip_without_lifecycle_api()
        .await?
    {
        return Ok(());
    }
    let t = setup_on("lifecycle", "desched-others", "1h", &[]).await?;
    let pods = t.workload_with("web", 3, &[(RESPONDER, 10000)]).await?;
    let (plain, opted, other) = (&pods[0], &pods[1], &pods[2]);
    t.annotate(plain, json!({DESCHEDULER_REQUEST_EVICT_ONLY: null}))
        .await?;
    for pod in [plain, opted] {
        upstream::request_eviction(&t.env.client, &TargetPod::of(pod)?, DRAIN).await?;
        t.wait_eviction(pod, "handed to the responder", |e| {
            target_state(e, RESPONDER).as_deref() == Some(STATE_ACTIVE)
        })
        .await?;
    }
    let drains = |pod: &Pod| upstream::request_name(&pod.name_any(), DRAIN);
    let as_descheduler = t.descheduler.client().await?;

    // The answer, seen by a dry run: 429 in background, naming the drain's request.
    let answer = evict(&as_descheduler, plain, true).await?;
    let Err((429, message)) = &answer else {
        anyhow::bail!(
            "the eviction of a pod under another requester's request is answered 429, got {answer:?}"
        );
    };
    ensure!(
        message.contains(&format!(
            "Eviction triggered evacuation of pod {}/{} via EvictionRequest {}",
            t.env.namespace,
            plain.name_any(),
            drains(plain)
        )),
        "{message}"
    );

    // The descheduler asks for the pod that did not opt in every cycle; it stays.
    t.target(plain).await?;
    let descheduler = t.descheduler(json!({}))?;
    t.wait_evicted(&descheduler, "error", 2.0).await?;
    ensure!(
        t.env
            .api::<Pod>()
            .get_opt(&plain.name_any())
            .await?
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
        "the pod the drain's responder is migrating was evicted outright; bridge log:\n{}",
        t.bridge.log_tail(30)
    );
    ensure!(t.evacuations("already_evacuating")? >= 2.0);

    // The drain withdraws: its Eviction is canceled, and the descheduler's own decision stands.
    upstream::withdraw(&t.env.client, &TargetPod::of(plain)?, DRAIN).await?;
    wait::wait_for_deletion(&t.env.api::<Pod>(), &plain.name_any(), DEFAULT_TIMEOUT).await?;
    t.wait_evicted(&descheduler, "success", 1.0).await?;
    drop(descheduler);

    // The opted-in pod under the drain's request counts against the node's limit of 1: the
    // other pod is never asked for.
    t.target(opted).await?;
    let limits = json!({"maxNoOfPodsToEvictPerNode": 1});
    let descheduler = t.descheduler(limits)?;
    t.wait_evicted(&descheduler, "background", 1.0).await?;
    t.target(other).await?;
    t.wait_evicted(&descheduler, NODE_LIMIT, 2.0).await?;
    ensure!(
        !t.descheduler_evictions()?.contains(&other.name_any()),
        "the other pod was asked for beyond the node's limit"
    );
    for pod in [plain, opted] {
        let bridges = upstream::request_name(&pod.name_any(), DESCHEDULER_REQUESTER_KEY);
        ensure!(
            t.env
                .api::<LifecycleRequest>()
                .get_opt(&bridges)
                .await?
                .is_none(),
            "the bridge joined the drain's eviction of {}",
            pod.name_any()
        );
    }
    ensure!(
        objects::pod_ready(&t.env.api::<Pod>().get(&opted.name_any()).await?),
        "the opted-in pod stays while its responder works"
    );
    t.env.ensure_no_invalid_writes()
}

/// The same on the `evictkit.io` CRD: a pod whose EvictionRequest lists another requester (a
/// drain's) is answered 429 naming that request, also without `request-evict-only`; the pod
/// stays and the bridge is not added to the request's requesters.
#[tokio::test]
async fn a_pod_in_another_requesters_crd_request_is_already_getting_evacuated() -> Result<()> {
    const CRD_DRAIN: &str = "drain.example.com";
    let t = setup("desched-others-crd", "1h", &[]).await?;
    let pods = t.workload("web", 1).await?;
    let pod = &pods[0];
    t.annotate(pod, json!({DESCHEDULER_REQUEST_EVICT_ONLY: null}))
        .await?;
    evictkit_runtime::clients::eviction_request::crd::request_eviction(
        &t.env.client,
        pod,
        CRD_DRAIN,
    )
    .await?;
    let as_descheduler = t.descheduler.client().await?;
    let answer = evict(&as_descheduler, pod, false).await?;
    let Err((429, message)) = &answer else {
        anyhow::bail!(
            "the eviction of a pod under another requester's request is answered 429, got {answer:?}"
        );
    };
    ensure!(
        message.contains(&format!(
            "Eviction triggered evacuation of pod {}/{} via EvictionRequest {}",
            t.env.namespace,
            pod.name_any(),
            uid(pod)
        )),
        "{message}"
    );
    let request = t.wait_request(pod, "requested", |_| true).await?;
    ensure!(
        requesters(&request) == [CRD_DRAIN],
        "requesters {:?}",
        requesters(&request)
    );
    ensure!(
        objects::pod_ready(&t.env.api::<Pod>().get(&pod.name_any()).await?),
        "the pod stays while its interceptor works"
    );
    ensure!(t.evacuations("already_evacuating")? == 1.0);
    t.env.ensure_no_invalid_writes()
}

/// The webhook answers from its caches of the EvictionRequests: an eviction costs no LIST of
/// the namespace's requests (a descheduler cycle evicting many pods of a namespace made one per
/// eviction, each inside the apiserver's webhook timeout, under failurePolicy Fail).
#[tokio::test]
async fn the_webhook_lists_no_eviction_requests_per_eviction() -> Result<()> {
    // setup_on starts the controller on lifecycle.k8s.io: ask the cluster first.
    if TestEnv::new("desched-lc-probe")
        .await?
        .skip_without_lifecycle_api()
        .await?
    {
        return Ok(());
    }
    let mut t = setup_on("lifecycle", "desched-lists", "1h", &[]).await?;
    let identity = t.env.service_account("bridge", "cluster-admin").await?;
    t.restart_bridge_as(&identity).await?;
    let pods = t.workload_with("web", 3, &[(RESPONDER, 10000)]).await?;
    // What the bridge's watches listed at start-up (once each) is not the evictions'.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = t.request_lists_by(&identity.username)?;
    let as_descheduler = t.descheduler.client().await?;
    let mut evictions = 0;
    for pod in pods.iter().chain(&pods) {
        let answer = evict(&as_descheduler, pod, false).await?;
        let Err((429, message)) = &answer else {
            anyhow::bail!(
                "the eviction of {} is answered 429, got {answer:?}",
                pod.name_any()
            );
        };
        ensure!(
            message.contains(&upstream::request_name(
                &pod.name_any(),
                DESCHEDULER_REQUESTER_KEY
            )),
            "{message}"
        );
        evictions += 1;
    }
    let lists = t.request_lists_by(&identity.username)? - before;
    ensure!(
        lists == 0,
        "the bridge listed EvictionRequests {lists} times for {evictions} evictions; bridge log:\n{}",
        t.bridge.log_tail(30)
    );
    ensure!(t.evacuations("requested")? == 3.0 && t.evacuations("repeated")? == 3.0);
    t.env.ensure_no_invalid_writes()
}

/// In an upgrade a pod may be asked for through either API: the bridge asking through
/// lifecycle.k8s.io answers the descheduler's eviction of a pod under a requester's
/// `evictkit.io` request (one not upgraded yet) as already getting evacuated, naming that
/// request, and the pod stays with its interceptor.
#[tokio::test]
async fn a_pod_asked_for_on_the_other_api_is_already_getting_evacuated() -> Result<()> {
    const NOT_UPGRADED: &str = "drain.example.com";
    if TestEnv::new("desched-lc-probe")
        .await?
        .skip_without_lifecycle_api()
        .await?
    {
        return Ok(());
    }
    let bridge = ["--eviction-request-api=lifecycle"];
    let t = setup_on("auto", "desched-either-api", "1h", &bridge).await?;
    let pods = t.workload("web", 1).await?;
    let pod = &pods[0];
    t.annotate(pod, json!({DESCHEDULER_REQUEST_EVICT_ONLY: null}))
        .await?;
    evictkit_runtime::clients::eviction_request::crd::request_eviction(
        &t.env.client,
        pod,
        NOT_UPGRADED,
    )
    .await?;
    let interceptor = InterceptorClient::new(t.env.client.clone(), INTERCEPTOR);
    t.wait_request(pod, "handed to the interceptor", |r| {
        interceptor.is_active(r)
    })
    .await?;

    let as_descheduler = t.descheduler.client().await?;
    let answer = evict(&as_descheduler, pod, false).await?;
    let Err((429, message)) = &answer else {
        anyhow::bail!(
            "the eviction of a pod under an evictkit.io request is answered 429 by the bridge on lifecycle.k8s.io, got {answer:?}"
        );
    };
    ensure!(
        message.contains(&format!(
            "Eviction triggered evacuation of pod {}/{} via EvictionRequest {}",
            t.env.namespace,
            pod.name_any(),
            uid(pod)
        )),
        "{message}"
    );
    ensure!(
        objects::pod_ready(&t.env.api::<Pod>().get(&pod.name_any()).await?),
        "the pod stays while its interceptor works"
    );
    let bridges = upstream::request_name(&pod.name_any(), DESCHEDULER_REQUESTER_KEY);
    ensure!(
        t.env
            .api::<LifecycleRequest>()
            .get_opt(&bridges)
            .await?
            .is_none(),
        "the bridge asked too"
    );
    ensure!(t.evacuations("already_evacuating")? == 1.0);
    t.env.ensure_no_invalid_writes()
}
