//! pdb-policy-webhook (KEP-3017) against the real control plane: the apiserver calls the
//! webhook process over TLS; PDB status comes from the real disruption controller; evictions
//! are answered by the real eviction subresource.
//!
//! The oracle test compares `explain`'s prediction with the apiserver's answer to a dry-run
//! eviction over a matrix of pod phase x readiness x terminating x unhealthyPodEvictionPolicy x
//! budget state x number of PDBs. Pods carry kwok's custom-status annotation and no node, so
//! the statuses the test writes stay; terminating pods are held by a finalizer.
//!
//! "Status stale" (`status.observedGeneration < metadata.generation`) is produced by a PDB
//! whose status the disruption controller cannot compute: a `maxUnavailable` PDB needs the
//! scale of each selected pod's controller, and a pod controlled by a ConfigMap (which has no
//! scale subresource) makes the controller fail its sync. Its fail-safe then writes
//! `disruptionsAllowed: 0` and a `SyncFailed` condition but never advances
//! `observedGeneration`, so the PDB stays stale for as long as the test needs — unlike a spec
//! change raced against the controller, which it usually wins within milliseconds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use evictkit_api::{
    CheckAction, PodDisruptionBudgetPolicy, PodDisruptionBudgetPolicySpec, PolicyMode,
    StricterEviction, UnhealthyPodEvictionPolicyType,
};
use evictkit_commands::explain::{ExplainArgs, Output};
use evictkit_core::pdb_policy::Explanation;
use evictkit_harness::TestEnv;
use evictkit_harness::component::{Component, free_port};
use evictkit_harness::objects::{self, Budget, CUSTOM_STATUS_ANNOTATION};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_harness::webhook::{Registration, rule};
use evictkit_runtime::process::metrics::Metrics;
use evictkit_runtime::serving::webhook::{Admission, Webhooks};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use kube::core::admission::AdmissionRequest;
use kube::{Api, Client};
use serde_json::json;

const BINARY: &str = "pdb-policy-webhook";
/// Holds terminating pods of the oracle matrix in place until the test releases them.
const HOLD_FINALIZER: &str = "e2e.evictkit.io/hold";

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// A cluster-scoped policy selecting only `env`'s namespace, deleted with the test.
struct Policy {
    client: Client,
    name: String,
}

impl Policy {
    async fn create(
        env: &TestEnv,
        suffix: &str,
        spec: PodDisruptionBudgetPolicySpec,
    ) -> Result<Self> {
        let name = format!("{}-{suffix}", env.namespace);
        let mut spec = spec;
        spec.namespace_selector = Some(objects::namespace_selector(&env.namespace));
        let policy = PodDisruptionBudgetPolicy::new(&name, spec);
        Api::<PodDisruptionBudgetPolicy>::all(env.client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .with_context(|| format!("creating PodDisruptionBudgetPolicy {name}"))?;
        env.delete_on_drop::<PodDisruptionBudgetPolicy>(&name);
        Ok(Self {
            client: env.client.clone(),
            name,
        })
    }

    fn api(&self) -> Api<PodDisruptionBudgetPolicy> {
        Api::all(self.client.clone())
    }

    async fn patch_spec(&self, spec: serde_json::Value) -> Result<()> {
        self.api()
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .with_context(|| format!("patching PodDisruptionBudgetPolicy {}", self.name))
            .map(drop)
    }
}

/// The webhook process with its three webhooks registered for `envs`' namespaces.
struct Webhook {
    component: Component,
}

impl Webhook {
    /// Starts `pdb-policy-webhook serve` and registers the webhooks for each of `envs` (each
    /// registration is scoped to that env's namespace). Start it after creating the policies
    /// it must know at once: readiness waits for the caches' first list.
    async fn start(envs: &[&TestEnv], roles: &str) -> Result<Self> {
        let (webhook, addr, ca_pem) = Self::launch(envs[0], roles).await?;
        for env in envs {
            let url = |path: &str| format!("https://{addr}{path}");
            let pdb_rule = || {
                vec![rule(
                    &["policy"],
                    &["v1"],
                    &["poddisruptionbudgets"],
                    &["CREATE", "UPDATE"],
                )]
            };
            // Fail, unlike the chart's Ignore: a test must see a webhook that does not answer.
            env.register_mutating_webhook(
                Registration {
                    name: "mutate-pdb".into(),
                    url: url("/mutate-pdb"),
                    rules: pdb_rule(),
                    failure_policy: "Fail".into(),
                },
                &ca_pem,
            )
            .await?;
            env.register_validating_webhook(
                Registration {
                    name: "validate-pdb".into(),
                    url: url("/validate-pdb"),
                    rules: pdb_rule(),
                    failure_policy: "Fail".into(),
                },
                &ca_pem,
            )
            .await?;
            env.register_validating_webhook(
                Registration {
                    name: "validate-eviction".into(),
                    url: url("/validate-eviction"),
                    rules: vec![rule(&[""], &["v1"], &["pods/eviction"], &["CREATE"])],
                    failure_policy: "Fail".into(),
                },
                &ca_pem,
            )
            .await?;
        }
        Ok(webhook)
    }

    /// `pdb-policy-webhook serve` with a serving certificate of the cluster CA, registered
    /// nowhere yet: the process, its webhook address and the CA.
    async fn launch(env: &TestEnv, roles: &str) -> Result<(Self, String, String)> {
        let cert = env.serving_cert()?;
        let dir = env
            .cluster_dir()
            .join("e2e-certs")
            .join(format!("{}-pdb-policy", env.namespace));
        let (cert_file, key_file) = cert.write_to(&dir)?;
        let port = free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let mut component = env.start_component(
            BINARY,
            &[
                "serve",
                "--webhook-addr",
                &addr,
                "--tls-cert-file",
                &cert_file.to_string_lossy(),
                "--tls-key-file",
                &key_file.to_string_lossy(),
                "--leader-elect=false",
                &format!("--roles={roles}"),
            ],
        )?;
        component.wait_ready(DEFAULT_TIMEOUT).await?;
        Ok((Self { component }, addr, cert.ca_pem))
    }

    fn metric(&self, series: &str) -> Result<f64> {
        Ok(self.component.metric_value(series)?.unwrap_or(0.0))
    }
}

/// Retries `check` for up to `DEFAULT_TIMEOUT`: the webhook learns about a changed policy
/// through its watch, a moment after the change.
async fn eventually<F, Fut>(what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    loop {
        match check().await {
            Ok(()) => return Ok(()),
            Err(error) if tokio::time::Instant::now() >= deadline => {
                return Err(
                    error.context(format!("{what}: still failing after {DEFAULT_TIMEOUT:?}"))
                );
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// A pod whose status the test writes (kwok leaves it alone) and that no scheduler binds.
fn custom_pod(name: &str, app: &str) -> Pod {
    let mut pod = objects::pod(name, app);
    pod.metadata.annotations.get_or_insert_default().insert(
        CUSTOM_STATUS_ANNOTATION.0.into(),
        CUSTOM_STATUS_ANNOTATION.1.into(),
    );
    pod.spec.get_or_insert_default().scheduler_name = Some("e2e-nobody".into());
    pod
}

/// Writes `phase` and the given condition types as True (Ready False unless listed).
async fn set_status(
    env: &TestEnv,
    name: &str,
    phase: &str,
    true_conditions: &[&str],
) -> Result<()> {
    let mut conditions: Vec<serde_json::Value> = true_conditions
        .iter()
        .map(|kind| json!({"type": kind, "status": "True"}))
        .collect();
    if !true_conditions.contains(&"Ready") {
        conditions.push(json!({"type": "Ready", "status": "False"}));
    }
    env.api::<Pod>()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase, "conditions": conditions}})),
        )
        .await
        .with_context(|| format!("writing the status of pod {}/{name}", env.namespace))
        .map(drop)
}

/// Evicts with `dryRun: All` and returns the apiserver's Status, success or failure alike.
async fn evict(env: &TestEnv, name: &str, dry_run: bool) -> Result<Status> {
    let params = EvictParams {
        delete_options: Some(DeleteParams {
            dry_run,
            ..Default::default()
        }),
        post_options: PostParams {
            dry_run,
            ..Default::default()
        },
    };
    match env.api::<Pod>().evict(name, &params).await {
        Ok(status) => Ok(status),
        Err(kube::Error::Api(status)) => Ok(*status),
        Err(error) => Err(error).with_context(|| format!("evicting {}/{name}", env.namespace)),
    }
}

fn budget_cause(status: &Status) -> Option<String> {
    status
        .details
        .as_ref()?
        .causes
        .iter()
        .find(|cause| cause.reason == "DisruptionBudget")
        .map(|cause| cause.message.clone())
}

async fn explain_pod(client: &Client, namespace: &str, name: &str) -> Result<Explanation> {
    let args = ExplainArgs {
        pod: Some(format!("{namespace}/{name}")),
        node: None,
        output: Output::Json,
        // the harness's name for the webhook registered as "validate-eviction".
        eviction_webhook_name: "validate-eviction.e2e.evictkit.io".into(),
    };
    let mut explanations = evictkit_commands::explain::explain(client.clone(), &args).await?;
    explanations.pop().context("explain returned nothing")
}

// ---------------------------------------------------------------------------------------------
// The oracle
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BudgetState {
    Met,
    NotMet,
    Stale,
}

const PHASES: [&str; 4] = ["Pending", "Running", "Succeeded", "Failed"];
const POLICIES: [Option<&str>; 3] = [None, Some("IfHealthyBudget"), Some("AlwaysAllow")];
const STATES: [BudgetState; 3] = [BudgetState::Met, BudgetState::NotMet, BudgetState::Stale];

/// One group of pods sharing an `app` label and its PDBs.
struct Group {
    app: String,
    policy: Option<&'static str>,
    state: BudgetState,
    pdbs: usize,
}

fn groups() -> Vec<Group> {
    let mut groups = vec![Group {
        app: "none".into(),
        policy: None,
        state: BudgetState::Met,
        pdbs: 0,
    }];
    for pdbs in [1, 2] {
        for policy in POLICIES {
            for state in STATES {
                groups.push(Group {
                    app: format!(
                        "p{pdbs}-{}-{}",
                        policy.map_or("unset".to_owned(), str::to_lowercase),
                        format!("{state:?}").to_lowercase()
                    ),
                    policy,
                    state,
                    pdbs,
                });
            }
        }
    }
    groups
}

/// A subject pod of the matrix.
#[derive(Debug, Clone)]
struct Subject {
    name: String,
    phase: &'static str,
    ready: bool,
    terminating: bool,
}

fn subjects(app: &str) -> Vec<Subject> {
    let mut subjects = Vec::new();
    for phase in PHASES {
        for ready in [true, false] {
            for terminating in [false, true] {
                subjects.push(Subject {
                    name: format!(
                        "{app}-{}-{}-{}",
                        phase.to_lowercase(),
                        if ready { "ready" } else { "unready" },
                        if terminating { "terminating" } else { "live" }
                    ),
                    phase,
                    ready,
                    terminating,
                });
            }
        }
    }
    subjects
}

async fn create_subject(env: &TestEnv, app: &str, subject: &Subject) -> Result<()> {
    let mut pod = custom_pod(&subject.name, app);
    if subject.terminating {
        pod.metadata.finalizers = Some(vec![HOLD_FINALIZER.into()]);
    }
    env.create(&pod).await?;
    let conditions: &[&str] = if subject.ready { &["Ready"] } else { &[] };
    set_status(env, &subject.name, subject.phase, conditions).await?;
    if subject.terminating {
        env.api::<Pod>()
            .delete(&subject.name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting {}/{}", env.namespace, subject.name))?;
    }
    Ok(())
}

/// Two Ready pods per group, so a budget of minAvailable 1 is met whatever the subjects are;
/// in stale groups they are controlled by a ConfigMap, which has no scale (see module docs).
async fn create_fillers(env: &TestEnv, group: &Group, owner: &ConfigMap) -> Result<()> {
    for i in 0..2 {
        let name = format!("{}-filler-{i}", group.app);
        let mut pod = custom_pod(&name, &group.app);
        if group.state == BudgetState::Stale {
            pod.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: owner.metadata.name.clone().unwrap_or_default(),
                uid: owner.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]);
        }
        env.create(&pod).await?;
        set_status(env, &name, "Running", &["Ready"]).await?;
    }
    Ok(())
}

fn group_pdbs(group: &Group) -> Vec<PodDisruptionBudget> {
    let budget = || match group.state {
        BudgetState::Met => Budget::MinAvailable(IntOrString::Int(1)),
        BudgetState::NotMet => Budget::MinAvailable(IntOrString::Int(100)),
        BudgetState::Stale => Budget::MaxUnavailable(IntOrString::Int(1)),
    };
    (0..group.pdbs)
        .map(|i| {
            objects::pdb(
                &format!("{}-{}", group.app, ["a", "b"][i]),
                &group.app,
                budget(),
                group.policy,
            )
        })
        .collect()
}

/// Waits until the disruption controller has settled `pdb`: observed and counting every
/// healthy pod, or (stale groups) failed its sync without observing the generation.
async fn wait_settled(env: &TestEnv, pdb: &str, state: BudgetState, healthy: i32) -> Result<()> {
    let what = match state {
        BudgetState::Stale => "SyncFailed with observedGeneration behind generation".to_owned(),
        _ => format!("observed with currentHealthy={healthy}"),
    };
    wait::wait_for(
        &env.api::<PodDisruptionBudget>(),
        pdb,
        DEFAULT_TIMEOUT,
        &what,
        |pdb| {
            let Some(status) = pdb.status.as_ref() else {
                return false;
            };
            let observed = status.observed_generation == pdb.metadata.generation;
            match state {
                BudgetState::Stale => {
                    !observed
                        && status
                            .conditions
                            .iter()
                            .flatten()
                            .any(|c| c.type_ == "DisruptionAllowed" && c.reason == "SyncFailed")
                }
                _ => observed && status.current_healthy == Some(healthy),
            }
        },
    )
    .await
    .map(drop)
}

#[tokio::test]
async fn explain_predicts_the_apiservers_answer_to_every_dry_run_eviction_of_the_matrix()
-> Result<()> {
    let env = TestEnv::new("pdbp-oracle").await?;
    env.apply_crd("PodDisruptionBudgetPolicy").await?;
    let owner = env
        .create(&ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("not-scalable".into()),
                ..Default::default()
            },
            ..Default::default()
        })
        .await?;
    let groups = groups();
    let mut work = Vec::new();
    for group in &groups {
        for subject in subjects(&group.app) {
            work.push((group.app.clone(), subject));
        }
    }
    for group in &groups {
        create_fillers(&env, group, &owner).await?;
    }
    stream::iter(work.iter())
        .map(|(app, subject)| create_subject(&env, app, subject))
        .buffer_unordered(12)
        .try_collect::<Vec<()>>()
        .await?;

    // Healthy as the disruption controller counts: Ready and not being deleted.
    let healthy = 2 + subjects("x")
        .iter()
        .filter(|s| s.ready && !s.terminating)
        .count() as i32;
    for group in &groups {
        for pdb in group_pdbs(group) {
            let name = pdb.metadata.name.clone().unwrap_or_default();
            env.create(&pdb).await?;
            wait_settled(&env, &name, group.state, healthy).await?;
        }
    }

    let checks = stream::iter(work.iter())
        .map(|(_, subject)| async {
            let explanation = explain_pod(&env.client, &env.namespace, &subject.name).await?;
            let status = evict(&env, &subject.name, true).await?;
            anyhow::Ok((subject.clone(), explanation, status))
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;

    let mut mismatches = Vec::new();
    let mut outcomes = BTreeSet::new();
    for (subject, explanation, status) in &checks {
        outcomes.insert(explanation.outcome);
        let predicted = (
            i32::from(explanation.prediction.code),
            explanation.prediction.message.as_str(),
            explanation.prediction.cause.clone(),
        );
        let answered = (
            status.code as i32,
            status.message.as_str(),
            budget_cause(status),
        );
        if predicted != answered {
            mismatches.push(format!(
                "{}: explain {predicted:?} ({}), apiserver {answered:?}",
                subject.name, explanation.outcome
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} differ:\n{}",
        mismatches.len(),
        checks.len(),
        mismatches.join("\n")
    );
    // The matrix reaches every branch of the decision that a test can produce.
    for outcome in [
        "NoPdb",
        "PdbsIgnoredPending",
        "PdbsIgnoredTerminal",
        "PdbsIgnoredTerminating",
        "UnhealthyPodAlwaysAllowed",
        "UnhealthyPodHealthyBudget",
        "BudgetAllows",
        "MultiplePdbs",
        "BudgetNotObserved",
        "NoDisruptionsAllowed",
    ] {
        assert!(
            outcomes.contains(outcome),
            "no case reached {outcome}; reached {outcomes:?}"
        );
    }
    assert_eq!(checks.len(), groups.len() * 16);

    release_held_pods(&env).await
}

/// Removes the hold finalizer so the namespace can go.
async fn release_held_pods(env: &TestEnv) -> Result<()> {
    let pods = env.api::<Pod>().list(&ListParams::default()).await?;
    for pod in pods
        .items
        .iter()
        .filter(|p| p.metadata.finalizers.is_some())
    {
        let name = pod.metadata.name.clone().unwrap_or_default();
        env.api::<Pod>()
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .with_context(|| format!("releasing {}/{name}", env.namespace))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Defaulting, enforcing, namespace selection, status
// ---------------------------------------------------------------------------------------------

fn policy_spec(
    value: UnhealthyPodEvictionPolicyType,
    mode: PolicyMode,
) -> PodDisruptionBudgetPolicySpec {
    PodDisruptionBudgetPolicySpec {
        unhealthy_pod_eviction_policy: Some(value),
        mode,
        // Quiet checks: these tests are about the field.
        overlapping_budgets: CheckAction::Allow,
        budgets_never_allowing_disruption: CheckAction::Allow,
        budgets_selecting_no_pods: CheckAction::Allow,
        ..Default::default()
    }
}

fn policy_of(pdb: &PodDisruptionBudget) -> Option<&str> {
    pdb.spec.as_ref()?.unhealthy_pod_eviction_policy.as_deref()
}

#[tokio::test]
async fn default_mode_fills_the_field_only_when_unset_and_enforce_overwrites_it() -> Result<()> {
    let env = TestEnv::new("pdbp-mode").await?;
    env.apply_crd("PodDisruptionBudgetPolicy").await?;
    let policy = Policy::create(
        &env,
        "mode",
        policy_spec(
            UnhealthyPodEvictionPolicyType::AlwaysAllow,
            PolicyMode::Default,
        ),
    )
    .await?;
    let webhook = Webhook::start(&[&env], "webhook").await?;
    let pdbs = env.api::<PodDisruptionBudget>();

    let unset = env
        .create(&objects::pdb(
            "unset",
            "web",
            Budget::MinAvailable(IntOrString::Int(1)),
            None,
        ))
        .await?;
    assert_eq!(
        policy_of(&unset),
        Some("AlwaysAllow"),
        "Default mode fills an unset field"
    );
    let own = env
        .create(&objects::pdb(
            "own",
            "db",
            Budget::MinAvailable(IntOrString::Int(1)),
            Some("IfHealthyBudget"),
        ))
        .await?;
    assert_eq!(
        policy_of(&own),
        Some("IfHealthyBudget"),
        "Default mode keeps the PDB's own choice"
    );
    assert_eq!(
        webhook.metric("evictkit_pdb_policy_webhook_pdbs_defaulted_total{mode=\"Default\"}")?,
        1.0
    );

    policy.patch_spec(json!({"mode": "Enforce"})).await?;
    eventually(
        "Enforce mode overwrites IfHealthyBudget on update",
        || async {
            let updated = pdbs
                .patch(
                    "own",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"minAvailable": 2}})),
                )
                .await?;
            if policy_of(&updated) == Some("AlwaysAllow") {
                Ok(())
            } else {
                bail!("still {:?}", policy_of(&updated))
            }
        },
    )
    .await?;
    // A dry-run create is answered the same, without side effects.
    let dry = pdbs
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &objects::pdb(
                "dry",
                "cache",
                Budget::MinAvailable(IntOrString::Int(1)),
                Some("IfHealthyBudget"),
            ),
        )
        .await?;
    assert_eq!(policy_of(&dry), Some("AlwaysAllow"));
    assert!(pdbs.get_opt("dry").await?.is_none());
    assert!(
        webhook.metric("evictkit_pdb_policy_webhook_pdbs_defaulted_total{mode=\"Enforce\"}")?
            >= 2.0
    );
    assert!(
        webhook.metric(
            "evictkit_pdb_policy_webhook_admission_requests_total{result=\"mutated\",webhook=\"mutate-pdb\"}"
        )? >= 3.0
    );
    Ok(())
}

#[tokio::test]
async fn only_selected_namespaces_are_defaulted_and_precedence_decides_between_policies()
-> Result<()> {
    let selected = TestEnv::new("pdbp-ns-a").await?;
    let other = TestEnv::new("pdbp-ns-b").await?;
    selected.apply_crd("PodDisruptionBudgetPolicy").await?;
    let low = Policy::create(
        &selected,
        "low",
        policy_spec(
            UnhealthyPodEvictionPolicyType::IfHealthyBudget,
            PolicyMode::Default,
        ),
    )
    .await?;
    let mut high_spec = policy_spec(
        UnhealthyPodEvictionPolicyType::AlwaysAllow,
        PolicyMode::Default,
    );
    high_spec.precedence = 10;
    let high = Policy::create(&selected, "high", high_spec).await?;
    // Highest precedence but invalid (a condition type is no qualified name): in force nowhere.
    let mut invalid_spec = policy_spec(
        UnhealthyPodEvictionPolicyType::IfHealthyBudget,
        PolicyMode::Enforce,
    );
    invalid_spec.precedence = 100;
    invalid_spec.eviction = Some(StricterEviction {
        required_pod_conditions: vec!["not a condition type".into()],
        protect_unhealthy_pods_with_local_storage: false,
    });
    let invalid = Policy::create(&selected, "invalid", invalid_spec).await?;
    // The controller role writes the policies' status.
    let _webhook = Webhook::start(&[&selected, &other], "webhook,controller").await?;

    let in_selected = selected
        .create(&objects::pdb(
            "web",
            "web",
            Budget::MinAvailable(IntOrString::Int(1)),
            None,
        ))
        .await?;
    assert_eq!(
        policy_of(&in_selected),
        Some("AlwaysAllow"),
        "the policy of higher precedence wins"
    );
    let in_other = other
        .create(&objects::pdb(
            "web",
            "web",
            Budget::MinAvailable(IntOrString::Int(1)),
            None,
        ))
        .await?;
    assert_eq!(
        policy_of(&in_other),
        None,
        "a namespace no policy selects is left alone"
    );

    let covers = |policy: &Policy, namespaces: Vec<String>| {
        let api = policy.api();
        let name = policy.name.clone();
        async move {
            wait::wait_for(
                &api,
                &name,
                DEFAULT_TIMEOUT,
                &format!("status.namespaces = {namespaces:?}, Valid"),
                |p: &PodDisruptionBudgetPolicy| {
                    p.status.as_ref().is_some_and(|s| {
                        s.namespaces == namespaces
                            && s.conditions
                                .iter()
                                .any(|c| c.type_ == "Valid" && c.status == "True")
                    })
                },
            )
            .await
            .map(drop)
        }
    };
    covers(&high, vec![selected.namespace.clone()]).await?;
    covers(&low, vec![]).await?;
    wait::wait_for(
        &invalid.api(),
        &invalid.name,
        DEFAULT_TIMEOUT,
        "Valid=False naming the bad condition type",
        |p: &PodDisruptionBudgetPolicy| {
            p.status.as_ref().is_some_and(|s| {
                s.namespaces.is_empty()
                    && s.conditions.iter().any(|c| {
                        c.type_ == "Valid"
                            && c.status == "False"
                            && c.message.contains("requiredPodConditions[0]")
                    })
            })
        },
    )
    .await?;
    Ok(())
}

/// The reasons of the events.k8s.io Events on PDB `name`.
async fn event_reasons(env: &TestEnv, name: &str) -> Result<Vec<String>> {
    let events = env
        .api::<k8s_openapi::api::events::v1::Event>()
        .list(&ListParams::default())
        .await?;
    Ok(events
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("PodDisruptionBudget") && r.name.as_deref() == Some(name)
            })
        })
        .filter_map(|e| e.reason)
        .collect())
}

/// A policy acts on the PDBs that were there before it. In Default mode an
/// unset field is reported (the policy's status, an Event on the PDB, a gauge) and left alone;
/// switched to Enforce (e.g. AlwaysAllow, installed to unblock a stuck drain), the controller
/// sets the policy's value on every PDB at once, with an Event on each, without waiting for an
/// edit.
#[tokio::test]
async fn existing_budgets_are_reported_and_enforce_brings_them_into_conformance() -> Result<()> {
    let env = TestEnv::new("pdbp-existing").await?;
    env.apply_crd("PodDisruptionBudgetPolicy").await?;
    let pdbs = env.api::<PodDisruptionBudget>();
    // There before the policy and the webhook.
    let budget = || Budget::MinAvailable(IntOrString::Int(1));
    env.create(&objects::pdb("unset", "web", budget(), None))
        .await?;
    env.create(&objects::pdb(
        "own",
        "db",
        budget(),
        Some("IfHealthyBudget"),
    ))
    .await?;
    let policy = Policy::create(
        &env,
        "existing",
        policy_spec(
            UnhealthyPodEvictionPolicyType::AlwaysAllow,
            PolicyMode::Default,
        ),
    )
    .await?;
    let webhook = Webhook::start(&[&env], "webhook,controller").await?;
    let id = |name: &str| format!("{}/{name}", env.namespace);
    let gauge = format!(
        "evictkit_pdb_policy_webhook_nonconforming_budgets{{policy=\"{}\"}}",
        policy.name
    );
    let status_is = |budgets: i32, conforming: i32, others: Vec<String>| {
        let policy = &policy;
        async move {
            let status = policy
                .api()
                .get(&policy.name)
                .await?
                .status
                .unwrap_or_default();
            let got = (
                status.budgets,
                status.conforming_budgets,
                status.non_conforming_budgets,
            );
            if got == (budgets, conforming, others.clone()) {
                Ok(())
            } else {
                bail!("status (budgets, conforming, non-conforming) is {got:?}")
            }
        }
    };

    eventually(
        "Default mode reports the PDB that leaves the field unset",
        || status_is(2, 1, vec![id("unset")]),
    )
    .await?;
    // Its own resync sets the gauge: the status may have come from the controller of a test
    // running alongside (each runs one for every namespace).
    eventually("the gauge counts the unset PDB", || async {
        let value = webhook.metric(&gauge)?;
        if value == 1.0 {
            Ok(())
        } else {
            bail!("{gauge} {value}")
        }
    })
    .await?;
    assert_eq!(
        policy_of(&pdbs.get("unset").await?),
        None,
        "Default mode rewrites no existing PDB"
    );
    eventually("an Event on the unset PDB", || async {
        let reasons = event_reasons(&env, "unset").await?;
        if reasons
            .iter()
            .any(|r| r == "UnhealthyPodEvictionPolicyNotDefaulted")
        {
            Ok(())
        } else {
            bail!("events {reasons:?}")
        }
    })
    .await?;

    policy.patch_spec(json!({"mode": "Enforce"})).await?;
    eventually("Enforce sets AlwaysAllow on the existing PDBs", || async {
        let values: Vec<Option<String>> = pdbs
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|p| policy_of(p).map(str::to_owned))
            .collect();
        if values
            == [
                Some("AlwaysAllow".to_owned()),
                Some("AlwaysAllow".to_owned()),
            ]
        {
            Ok(())
        } else {
            bail!("unhealthyPodEvictionPolicy of the PDBs: {values:?}")
        }
    })
    .await?;
    eventually("the status counts both as conforming", || {
        status_is(2, 2, vec![])
    })
    .await?;
    eventually("the gauge drops to 0", || async {
        let value = webhook.metric(&gauge)?;
        if value == 0.0 {
            Ok(())
        } else {
            bail!("{gauge} {value}")
        }
    })
    .await?;
    for name in ["own", "unset"] {
        let reasons = event_reasons(&env, name).await?;
        assert!(
            reasons
                .iter()
                .any(|r| r == "UnhealthyPodEvictionPolicyEnforced"),
            "PDB {name}: events {reasons:?}"
        );
    }
    Ok(())
}

/// How often the API server has been asked for, and has said, `reason` about PDB `name`: the
/// Events' occurrences, a series counted whole.
async fn event_occurrences(env: &TestEnv, name: &str, reason: &str) -> Result<i32> {
    let events = env
        .api::<k8s_openapi::api::events::v1::Event>()
        .list(&ListParams::default())
        .await?;
    Ok(events
        .items
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("PodDisruptionBudget")
                        && r.name.as_deref() == Some(name)
                })
        })
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum())
}

/// An Enforce policy's PATCH that the API server refuses (here a webhook of the test, which
/// counts the attempts) is retried with a back-off (5 s doubling: at most 4 attempts in 30 s,
/// not one every 5 s resync) and reported by one Warning Event while the refusal stays the same.
/// Counted per controller (by its identity): the webhooks of tests running alongside each run
/// a controller for every namespace too.
#[tokio::test]
async fn a_refused_enforcement_is_retried_with_back_off_and_reported_once() -> Result<()> {
    let env = TestEnv::new("pdbp-refused").await?;
    env.apply_crd("PodDisruptionBudgetPolicy").await?;
    let pdbs = env.api::<PodDisruptionBudget>();
    env.create(&objects::pdb(
        "own",
        "db",
        Budget::MinAvailable(IntOrString::Int(1)),
        Some("IfHealthyBudget"),
    ))
    .await?;
    let attempts: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let counted = attempts.clone();
    let served = env.serve_webhooks(Webhooks::new(Arc::new(Metrics::new("e2e")?)).route(
        "/refuse-pdb",
        move |request: AdmissionRequest<PodDisruptionBudget>| {
            let counted = counted.clone();
            async move {
                if !request.dry_run {
                    let user = request.user_info.username.unwrap_or_default();
                    *counted
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(user)
                        .or_default() += 1;
                }
                Admission::deny(403, "PDB updates refused by the test")
            }
        },
    ))?;
    let attempts = move || attempts.lock().unwrap_or_else(|e| e.into_inner()).clone();
    env.register_validating_webhook(
        Registration {
            name: "refuse-pdb".into(),
            url: format!("{}/refuse-pdb", served.base_url),
            rules: vec![rule(
                &["policy"],
                &["v1"],
                &["poddisruptionbudgets"],
                &["UPDATE"],
            )],
            failure_policy: "Fail".into(),
        },
        &served.ca_pem,
    )
    .await?;
    let dry_run = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let probe = Patch::Merge(json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}));
    eventually("the test's webhook refuses PDB updates", || async {
        match pdbs.patch("own", &dry_run, &probe).await {
            Err(_) => Ok(()),
            Ok(_) => bail!("a dry-run update went through"),
        }
    })
    .await?;
    let _policy = Policy::create(
        &env,
        "refused",
        policy_spec(
            UnhealthyPodEvictionPolicyType::AlwaysAllow,
            PolicyMode::Enforce,
        ),
    )
    .await?;
    let _webhook = Webhook::start(&[&env], "webhook,controller").await?;
    eventually("the first refusal", || async {
        if attempts().is_empty() {
            bail!("no PATCH of the PDB yet")
        } else {
            Ok(())
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let patches = attempts();
    let events = event_occurrences(&env, "own", "UnhealthyPodEvictionPolicyEnforceFailed").await?;
    ensure!(
        patches.values().all(|&n| n <= 4) && (1..=patches.len() as i32).contains(&events),
        "in the 30 s after the first refusal: PATCHes per controller {patches:?} (at most 4 \
         each with the back-off) and {events} refusal Events (at most one per controller: the \
         error did not change)"
    );
    assert_eq!(
        policy_of(&pdbs.get("own").await?),
        Some("IfHealthyBudget"),
        "refused, so unchanged"
    );
    Ok(())
}

/// An Enforce `AlwaysAllow` (put in to unblock a drain) goes with its policy: the controller
/// records each PDB's own value before it overwrites it and puts it back once the policy is
/// deleted, whether that was `IfHealthyBudget` or unset.
#[tokio::test]
async fn deleting_an_enforce_policy_restores_the_budgets_own_values() -> Result<()> {
    let env = TestEnv::new("pdbp-restore").await?;
    env.apply_crd("PodDisruptionBudgetPolicy").await?;
    let pdbs = env.api::<PodDisruptionBudget>();
    let budget = || Budget::MinAvailable(IntOrString::Int(1));
    env.create(&objects::pdb(
        "own",
        "db",
        budget(),
        Some("IfHealthyBudget"),
    ))
    .await?;
    env.create(&objects::pdb("unset", "web", budget(), None))
        .await?;
    let policy = Policy::create(
        &env,
        "unblock",
        policy_spec(
            UnhealthyPodEvictionPolicyType::AlwaysAllow,
            PolicyMode::Enforce,
        ),
    )
    .await?;
    let _webhook = Webhook::start(&[&env], "webhook,controller").await?;
    let values = || async {
        let mut values: Vec<(String, Option<String>)> = pdbs
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|p| {
                (
                    p.metadata.name.clone().unwrap_or_default(),
                    policy_of(p).map(str::to_owned),
                )
            })
            .collect();
        values.sort();
        anyhow::Ok(values)
    };
    let values_are = |expected: [(&'static str, Option<&'static str>); 2]| {
        let values = &values;
        async move {
            let got = values().await?;
            let expected: Vec<(String, Option<String>)> = expected
                .iter()
                .map(|(name, value)| ((*name).to_owned(), value.map(str::to_owned)))
                .collect();
            if got == expected {
                Ok(())
            } else {
                bail!("unhealthyPodEvictionPolicy of the PDBs: {got:?}")
            }
        }
    };
    eventually("Enforce sets AlwaysAllow on both", || {
        values_are([("own", Some("AlwaysAllow")), ("unset", Some("AlwaysAllow"))])
    })
    .await?;

    policy
        .api()
        .delete(&policy.name, &DeleteParams::default())
        .await?;
    eventually(
        "the policy's deletion restores each PDB's own value",
        || values_are([("own", Some("IfHealthyBudget")), ("unset", None)]),
    )
    .await?;
    for name in ["own", "unset"] {
        let pdb = pdbs.get(name).await?;
        ensure!(
            !pdb.metadata
                .annotations
                .unwrap_or_default()
                .contains_key(evictkit_api::keys::UNHEALTHY_POD_EVICTION_POLICY_BEFORE_ENFORCEMENT),
            "PDB {name} still carries the record"
        );
        let reasons = event_reasons(&env, name).await?;
        ensure!(
            reasons
                .iter()
                .any(|r| r == "UnhealthyPodEvictionPolicyRestored"),
            "PDB {name}: events {reasons:?}"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The PDB checks in each mode
// ---------------------------------------------------------------------------------------------

/// `kubectl create` of `manifest`, returning (succeeded, stderr) — kubectl prints admission
/// warnings as `Warning: ...` on stderr, which kube's client does not surface.
fn kubectl_create(env: &TestEnv, manifest: &str) -> Result<(bool, String)> {
    let kubectl = env.control_plane_bin("kubectl")?;
    let mut child = std::process::Command::new(kubectl)
        .args(["create", "-n", &env.namespace, "-f", "-"])
        .env("KUBECONFIG", env.kubeconfig())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running kubectl")?;
    use std::io::Write as _;
    child
        .stdin
        .take()
        .context("kubectl stdin")?
        .write_all(manifest.as_bytes())?;
    let output = child.wait_with_output()?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

fn pdb_manifest(name: &str, budget: &str, app: Option<&str>) -> String {
    let selector = app.map_or(String::new(), |app| {
        format!("  selector: {{matchLabels: {{app: {app}}}}}\n")
    });
    format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: {name}}}\nspec:\n  {budget}\n{selector}"
    )
}

#[tokio::test]
async fn overlapping_blocking_and_empty_budgets_are_denied_warned_or_allowed() -> Result<()> {
    let modes = [CheckAction::Deny, CheckAction::Warn, CheckAction::Allow];
    let mut envs = Vec::new();
    for action in modes {
        envs.push(TestEnv::new(&format!("pdbp-{}", format!("{action:?}").to_lowercase())).await?);
    }
    envs[0].apply_crd("PodDisruptionBudgetPolicy").await?;

    for (env, action) in envs.iter().zip(modes) {
        let spec = PodDisruptionBudgetPolicySpec {
            overlapping_budgets: action,
            budgets_never_allowing_disruption: action,
            budgets_selecting_no_pods: action,
            ..Default::default()
        };
        Policy::create(env, "checks", spec).await?;
    }
    let env_refs: Vec<&TestEnv> = envs.iter().collect();
    let webhook = Webhook::start(&env_refs, "webhook").await?;

    for (env, action) in envs.iter().zip(modes) {
        env.create(&objects::deployment("web", 2)).await?;
        env.wait_for_ready_pods("app=web", 2).await?;
        env.create(&objects::pdb(
            "web",
            "web",
            Budget::MaxUnavailable(IntOrString::Int(1)),
            None,
        ))
        .await?;
        // (PDB, rule it breaks)
        let cases = [
            (
                pdb_manifest("overlap", "minAvailable: 1", Some("web")),
                "OverlappingBudgets",
            ),
            (
                pdb_manifest("max-zero", "maxUnavailable: 0", Some("web-solo")),
                "NeverAllowsDisruption",
            ),
            (
                pdb_manifest("min-all", "minAvailable: 100%", Some("web-solo")),
                "NeverAllowsDisruption",
            ),
            (
                pdb_manifest("nothing", "minAvailable: 1", Some("absent")),
                "SelectsNoPods",
            ),
        ];
        // web-solo pods exist so that only the blocking rule applies to those cases.
        env.create(&custom_pod("solo", "web-solo")).await?;
        eventually("the webhook sees the deployment's pods and PDB", || async {
            let (_, stderr) =
                kubectl_create(env, &pdb_manifest("probe", "minAvailable: 1", Some("web")))?;
            let _ = env
                .api::<PodDisruptionBudget>()
                .delete("probe", &DeleteParams::default())
                .await;
            if action == CheckAction::Allow || stderr.contains("OverlappingBudgets") {
                Ok(())
            } else {
                bail!("no overlap reported yet: {stderr}")
            }
        })
        .await?;
        for (manifest, rule) in &cases {
            let (created, stderr) = kubectl_create(env, manifest)?;
            match action {
                CheckAction::Deny => {
                    assert!(!created, "{rule} in Deny mode must be refused: {stderr}");
                    assert!(
                        stderr.contains(rule) && stderr.contains("denied the request"),
                        "{stderr}"
                    );
                }
                CheckAction::Warn => {
                    assert!(created, "{rule} in Warn mode is admitted: {stderr}");
                    assert!(
                        stderr.contains("Warning:") && stderr.contains(rule),
                        "{stderr}"
                    );
                }
                CheckAction::Allow => {
                    assert!(created, "{rule} in Allow mode is admitted: {stderr}");
                    assert!(!stderr.contains("Warning:"), "{stderr}");
                }
            }
        }
    }
    assert!(
        webhook
            .metric("evictkit_pdb_policy_webhook_denials_total{rule=\"NeverAllowsDisruption\"}")?
            >= 2.0
    );
    assert!(
        webhook.metric("evictkit_pdb_policy_webhook_warnings_total{rule=\"SelectsNoPods\"}")?
            >= 1.0
    );
    assert!(webhook.metric("evictkit_pdb_policy_webhook_admission_requests_total{result=\"denied\",webhook=\"validate-pdb\"}")? >= 4.0);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The stricter eviction rules
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn stricter_health_denies_evictions_the_apiserver_would_allow_and_explain_says_so()
-> Result<()> {
    let env = TestEnv::new("pdbp-strict").await?;
    env.apply_crd("PodDisruptionBudgetPolicy").await?;
    let spec = PodDisruptionBudgetPolicySpec {
        eviction: Some(StricterEviction {
            required_pod_conditions: vec!["example.com/Synced".into()],
            protect_unhealthy_pods_with_local_storage: true,
        }),
        budgets_never_allowing_disruption: CheckAction::Allow,
        ..Default::default()
    };
    let _policy = Policy::create(&env, "strict", spec).await?;
    let webhook = Webhook::start(&[&env], "webhook").await?;

    // db: three Ready pods, one not Synced; the budget (minAvailable 2) allows one eviction,
    // the stricter health does not: only two pods are fully healthy.
    for (name, conditions) in [
        ("db-0", &["Ready", "example.com/Synced"][..]),
        ("db-1", &["Ready", "example.com/Synced"][..]),
        ("db-2", &["Ready"][..]),
    ] {
        env.create(&custom_pod(name, "db")).await?;
        set_status(&env, name, "Running", conditions).await?;
    }
    // cache: a not-Ready pod with an emptyDir under AlwaysAllow; the apiserver lets it go.
    let mut cache = custom_pod("cache-0", "cache");
    cache.spec.get_or_insert_default().volumes = Some(vec![k8s_openapi::api::core::v1::Volume {
        name: "data".into(),
        empty_dir: Some(Default::default()),
        ..Default::default()
    }]);
    env.create(&cache).await?;
    set_status(&env, "cache-0", "Running", &[]).await?;
    for i in 1..3 {
        let name = format!("cache-{i}");
        env.create(&custom_pod(&name, "cache")).await?;
        set_status(&env, &name, "Running", &["Ready"]).await?;
    }
    env.create(&objects::pdb(
        "db",
        "db",
        Budget::MinAvailable(IntOrString::Int(2)),
        None,
    ))
    .await?;
    env.create(&objects::pdb(
        "cache",
        "cache",
        Budget::MinAvailable(IntOrString::Int(2)),
        Some("AlwaysAllow"),
    ))
    .await?;
    wait_settled(&env, "db", BudgetState::Met, 3).await?;
    wait_settled(&env, "cache", BudgetState::Met, 2).await?;

    let cases = [
        (
            "db-0",
            "RequiredPodConditions",
            "the disruption budget db needs 2 healthy pods and would have 1",
        ),
        (
            "cache-0",
            "ProtectUnhealthyPodsWithLocalStorage",
            "is not Ready and keeps data in local volume \"data\"",
        ),
    ];
    for (pod, rule, fragment) in cases {
        let explanation = explain_pod(&env.client, &env.namespace, pod).await?;
        assert_eq!(
            (
                explanation.prediction.code,
                explanation.prediction.decided_by
            ),
            (429, "webhook"),
            "{explanation:?}"
        );
        assert!(
            explanation.prediction.message.contains(rule)
                && explanation.prediction.message.contains(fragment),
            "{explanation:?}"
        );
        eventually(
            &format!("the eviction of {pod} is denied by {rule}"),
            || async {
                let status = evict(&env, pod, true).await?;
                if status.code == 429 && status.message == explanation.prediction.message {
                    Ok(())
                } else {
                    bail!("{status:?}")
                }
            },
        )
        .await?;
        // The real (not dry-run) eviction gets the same answer, and the pod stays.
        let status = evict(&env, pod, false).await?;
        assert_eq!(status.code, 429, "{status:?}");
        assert_eq!(status.message, explanation.prediction.message);
        assert!(env.api::<Pod>().get_opt(pod).await?.is_some());
    }
    // db-2 is not Synced: evicting it costs no strict health, and the apiserver allows it.
    let status = evict(&env, "db-2", true).await?;
    assert_eq!(status.code, 201, "{status:?}");

    // The CLI prints the same prediction as JSON.
    let cli = std::process::Command::new(evictkit_harness::debug_dir().join(BINARY))
        .args(["explain", &format!("{}/db-0", env.namespace), "-o", "json"])
        .env("KUBECONFIG", env.kubeconfig())
        .output()?;
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    let printed: serde_json::Value = serde_json::from_slice(&cli.stdout)?;
    assert_eq!(printed[0]["prediction"]["code"], 429);
    // By default the message names the webhook as the chart does.
    let message = printed[0]["prediction"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.starts_with(&format!(
            "admission webhook {:?} denied the request: pdb-policy-webhook: rule RequiredPodConditions",
            evictkit_commands::explain::EVICTION_WEBHOOK_NAME
        )),
        "{message}"
    );
    assert_eq!(printed[0]["policy"], format!("{}-strict", env.namespace));
    assert!(
        webhook
            .metric("evictkit_pdb_policy_webhook_denials_total{rule=\"RequiredPodConditions\"}")?
            >= 2.0
    );
    assert!(
        webhook.metric(
            "evictkit_pdb_policy_webhook_denials_total{rule=\"ProtectUnhealthyPodsWithLocalStorage\"}"
        )? >= 2.0
    );
    Ok(())
}

/// `protectUnhealthyPodsWithLocalStorage` follows a pod's claim to its
/// PersistentVolume: a `local` PV (the KEP's own example) is local storage, an NFS one is not.
#[tokio::test]
async fn local_persistent_volumes_behind_claims_are_protected() -> Result<()> {
    let env = TestEnv::new("pdbp-local-pv").await?;
    env.apply_crd("PodDisruptionBudgetPolicy").await?;
    let spec = PodDisruptionBudgetPolicySpec {
        eviction: Some(StricterEviction {
            required_pod_conditions: vec![],
            protect_unhealthy_pods_with_local_storage: true,
        }),
        budgets_never_allowing_disruption: CheckAction::Allow,
        ..Default::default()
    };
    let _policy = Policy::create(&env, "local-pv", spec).await?;
    let _webhook = Webhook::start(&[&env], "webhook").await?;

    let volumes: Api<PersistentVolume> = Api::all(env.client.clone());
    let pv = |name: &str, source: serde_json::Value| -> Result<PersistentVolume> {
        let mut spec = json!({
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
        });
        spec.as_object_mut()
            .context("a PV spec is an object")?
            .extend(source.as_object().cloned().unwrap_or_default());
        Ok(serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": spec}),
        )?)
    };
    let local_pv = format!("{}-local", env.namespace);
    let nfs_pv = format!("{}-nfs", env.namespace);
    volumes
        .create(
            &PostParams::default(),
            &pv(
                &local_pv,
                json!({
                    "local": {"path": "/mnt/disks/ssd1"},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}
                    ]}]}},
                }),
            )?,
        )
        .await?;
    volumes
        .create(
            &PostParams::default(),
            &pv(
                &nfs_pv,
                json!({"nfs": {"server": "nfs.example.com", "path": "/export"}}),
            )?,
        )
        .await?;

    for (pod_name, volume) in [("db-0", &local_pv), ("db-1", &nfs_pv)] {
        let claim = format!("data-{pod_name}");
        env.create(&serde_json::from_value::<PersistentVolumeClaim>(json!({
            "metadata": {"name": claim},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }))?)
        .await?;
        let mut pod = custom_pod(pod_name, "db");
        pod.spec.get_or_insert_default().volumes = Some(vec![serde_json::from_value(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}),
        )?]);
        env.create(&pod).await?;
        set_status(&env, pod_name, "Running", &[]).await?;
    }
    env.create(&custom_pod("db-2", "db")).await?;
    set_status(&env, "db-2", "Running", &["Ready"]).await?;
    env.create(&objects::pdb(
        "db",
        "db",
        Budget::MinAvailable(IntOrString::Int(1)),
        Some("AlwaysAllow"),
    ))
    .await?;
    wait_settled(&env, "db", BudgetState::Met, 1).await?;

    let result = async {
        eventually("the eviction of db-0 (local PV) is denied", || async {
            let status = evict(&env, "db-0", true).await?;
            if status.code == 429
                && status
                    .message
                    .contains("rule ProtectUnhealthyPodsWithLocalStorage")
                && status
                    .message
                    .contains("keeps data in local volume \"data\"")
            {
                Ok(())
            } else {
                bail!("{status:?}")
            }
        })
        .await?;
        let explanation = explain_pod(&env.client, &env.namespace, "db-0").await?;
        assert_eq!(
            (
                explanation.prediction.code,
                explanation.prediction.decided_by
            ),
            (429, "webhook"),
            "{explanation:?}"
        );
        // Network storage: the apiserver's AlwaysAllow stands.
        let status = evict(&env, "db-1", true).await?;
        assert_eq!(status.code, 201, "{status:?}");
        anyhow::Ok(())
    }
    .await;
    for name in [&local_pv, &nfs_pv] {
        let _ = volumes.delete(name, &DeleteParams::default()).await;
    }
    result
}

/// Several `kubectl drain`s at once through the eviction webhook registered as the
/// chart registers it (failurePolicy Ignore, timeoutSeconds 5), under a policy whose stricter
/// rules it evaluates for every pod: every pod evicted, every eviction reviewed by the webhook,
/// and the apiserver counts no failed call of it (none failed open, none refused for an error).
#[tokio::test]
async fn kubectl_drain_of_several_nodes_at_once_fails_no_webhook_call() -> Result<()> {
    const NODES: usize = 4;
    const PER_NODE: usize = 6;
    const REVIEWED: &str = "evictkit_pdb_policy_webhook_admission_requests_total{result=\"allowed\",webhook=\"validate-eviction\"}";
    let env = TestEnv::new("pdb-drain").await?;
    env.apply_crd("PodDisruptionBudgetPolicy").await?;
    let spec = PodDisruptionBudgetPolicySpec {
        eviction: Some(StricterEviction {
            required_pod_conditions: vec!["ContainersReady".into()],
            protect_unhealthy_pods_with_local_storage: true,
        }),
        ..Default::default()
    };
    Policy::create(&env, "drain", spec).await?;
    let nodes = env.drain_pool("drain", NODES, PER_NODE).await?;
    let (webhook, addr, ca_pem) = Webhook::launch(&env, "webhook").await?;
    // A name of its own: the apiserver's metrics are per webhook name, and other tests
    // register a validate-eviction.e2e.evictkit.io of their own.
    env.register_validating_webhook_with(
        Registration {
            name: "drain-eviction".into(),
            url: format!("https://{addr}/validate-eviction"),
            rules: vec![rule(&[""], &["v1"], &["pods/eviction"], &["CREATE"])],
            failure_policy: "Ignore".into(),
        },
        &ca_pem,
        |webhook| webhook.timeout_seconds = Some(5),
    )
    .await?;
    let name = "drain-eviction.e2e.evictkit.io";
    let ours = |failed: std::collections::BTreeMap<String, f64>| -> f64 {
        let of_webhook = format!("name=\"{name}\"");
        (failed.iter())
            .filter(|(series, _)| series.contains(&of_webhook))
            .map(|(_, count)| count)
            .sum()
    };
    // The apiserver calls a new webhook configuration within moments: a dry-run eviction until
    // it calls this one.
    eventually("the apiserver calls the eviction webhook", || async {
        evict(&env, "drain-0-0", true).await?;
        anyhow::ensure!(env.webhook_calls(name).await? > 0.0, "not called yet");
        Ok(())
    })
    .await?;
    let failed_before = ours(env.failed_webhook_calls().await?);
    let calls_before = env.webhook_calls(name).await?;
    let reviewed_before = webhook.metric(REVIEWED)?;

    env.kubectl_drain_at_once(&nodes, Duration::from_secs(120))
        .await?;

    let failed = ours(env.failed_webhook_calls().await?) - failed_before;
    let calls = env.webhook_calls(name).await? - calls_before;
    let reviewed = webhook.metric(REVIEWED)? - reviewed_before;
    anyhow::ensure!(
        failed == 0.0,
        "the apiserver counts {failed} failed calls of the eviction webhook during the drain"
    );
    anyhow::ensure!(
        calls >= (NODES * PER_NODE) as f64 && reviewed == calls,
        "the apiserver called the eviction webhook {calls} times for the {} pods drained, and it allowed {reviewed}",
        NODES * PER_NODE
    );
    Ok(())
}
