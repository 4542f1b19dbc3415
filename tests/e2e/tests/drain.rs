//! `kubectl evictkit drain` as an operator and a script meet it: what happens when it cannot
//! read any more, how often it reads, what it names as the blocker of each pod it waits for
//! (live, in `--dry-run`, in `-o json` and in what it says it left), `uncordon`, the drain
//! that outlives its client (`--detach`, `drain status`, `drain wait`), kubectl's
//! `--grace-period` where a grace period can go, and kubectl's `-v`.
//! The plugin runs from `target/debug` (built by `cargo build --workspace --bins`), as the
//! identity of the kubeconfig each test gives it.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use evictkit_api::keys::DRAIN_REQUESTER_KEY;
use evictkit_api::node_drain::NodeDrain;
use evictkit_harness::TestEnv;
use evictkit_harness::objects::{self, Budget};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_runtime::clients::eviction_request::upstream;
use evictkit_runtime::clients::eviction_request::upstream::{INTENT_EVICTION, INTENT_WITHDRAWN};
use k8s_openapi::api::core::v1::{Event, EvictionResponder, Namespace, Node, Pod};
use k8s_openapi::api::lifecycle::v1alpha1::EvictionRequest;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// What one `kubectl evictkit ...` printed and how it exited.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn of(output: &std::process::Output) -> Self {
        Self {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// stdout as JSON lines (`-o json`): every line must be an object.
    fn json_lines(&self) -> Result<Vec<Value>> {
        self.stdout
            .lines()
            .map(|line| {
                serde_json::from_str::<Value>(line)
                    .with_context(|| format!("not a JSON line: {line:?}\n{self:?}"))
            })
            .collect()
    }
}

async fn run(command: Command) -> Result<Run> {
    let output = tokio::process::Command::from(command)
        .kill_on_drop(true)
        .output()
        .await
        .context("running kubectl evictkit")?;
    Ok(Run::of(&output))
}

fn pod_on(node: &str, name: &str, app: &str) -> Pod {
    let mut pod = objects::pod(name, app);
    pod.spec.get_or_insert_default().node_name = Some(node.to_owned());
    pod
}

/// A pod on `node` that a minAvailable 1 PDB of its own protects, in namespace `namespace`.
async fn blocked_pod(env: &TestEnv, namespace: &str, node: &str, name: &str) -> Result<Pod> {
    let pod = Api::<Pod>::namespaced(env.client.clone(), namespace)
        .create(&PostParams::default(), &pod_on(node, name, name))
        .await
        .with_context(|| format!("creating pod {namespace}/{name}"))?;
    protect(env, namespace, name).await?;
    Ok(pod)
}

/// A minAvailable 1 PDB for the pods labelled `app=<name>` in `namespace` (one, Ready),
/// once the disruption controller counts it.
async fn protect(env: &TestEnv, namespace: &str, name: &str) -> Result<()> {
    let mut pdb = objects::pdb(name, name, Budget::MinAvailable(IntOrString::Int(1)), None);
    pdb.metadata.namespace = Some(namespace.to_owned());
    let pdbs = Api::<PodDisruptionBudget>::namespaced(env.client.clone(), namespace);
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .with_context(|| format!("creating PDB {namespace}/{name}"))?;
    wait::wait_for(&pdbs, name, DEFAULT_TIMEOUT, "currentHealthy=1", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.current_healthy == Some(1))
    })
    .await?;
    Ok(())
}

/// A ClusterRole named `<namespace>-<name>` with `rules`, bound to ServiceAccount `account`
/// of the test's namespace; both deleted with the test. Returns the binding's name.
async fn grant(env: &TestEnv, name: &str, account: &str, rules: Vec<PolicyRule>) -> Result<String> {
    let name = format!("{}-{name}", env.namespace);
    let meta = ObjectMeta {
        name: Some(name.clone()),
        ..ObjectMeta::default()
    };
    Api::<ClusterRole>::all(env.client.clone())
        .create(
            &PostParams::default(),
            &ClusterRole {
                metadata: meta.clone(),
                rules: Some(rules),
                ..ClusterRole::default()
            },
        )
        .await
        .with_context(|| format!("creating ClusterRole {name}"))?;
    env.delete_on_drop::<ClusterRole>(&name);
    Api::<ClusterRoleBinding>::all(env.client.clone())
        .create(
            &PostParams::default(),
            &ClusterRoleBinding {
                metadata: meta,
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "ClusterRole".into(),
                    name: name.clone(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: account.into(),
                    namespace: Some(env.namespace.clone()),
                    ..Subject::default()
                }]),
            },
        )
        .await
        .with_context(|| format!("creating ClusterRoleBinding {name}"))?;
    env.delete_on_drop::<ClusterRoleBinding>(&name);
    Ok(name)
}

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    }
}

/// The drain as a ServiceAccount that may do all it needs; when its right to list Evictions is
/// taken away mid-drain, the drain cannot read where its pods stand: it withdraws the request
/// it made, says which read failed, and exits 1. (It used to exit 1 at the first failed list
/// and leave its request asking.)
#[tokio::test]
async fn a_drain_that_cannot_read_withdraws_what_it_asked() -> Result<()> {
    let env = TestEnv::new("drain-unread").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let (mut controller, node) = controller_and_node(&env).await?;
    let ns = env.namespace.clone();
    blocked_pod(&env, &ns, &node, "db-0").await?;
    env.wait_for_ready_pods("app=db-0", 1).await?;
    let account = "drainer";
    // No more than discovery; what the drain may do is granted below.
    let identity = env.service_account(account, "system:discovery").await?;
    grant(
        &env,
        "drain",
        account,
        vec![
            rule("", &["nodes"], &["get", "list", "patch"]),
            rule("", &["pods"], &["get", "list", "watch"]),
            rule("policy", &["poddisruptionbudgets"], &["get", "list"]),
            rule(
                "lifecycle.k8s.io",
                &["evictionrequests"],
                &["get", "list", "watch", "create", "patch", "update"],
            ),
        ],
    )
    .await?;
    let evictions = grant(
        &env,
        "drain-evictions",
        account,
        vec![rule(
            "lifecycle.k8s.io",
            &["evictions"],
            &["get", "list", "watch"],
        )],
    )
    .await?;
    let drain = env.plugin(
        &identity.kubeconfig,
        &[
            "drain",
            &node,
            "--api",
            "lifecycle",
            "--force",
            "--timeout",
            "90s",
        ],
    )?;
    let running = tokio::spawn(run(drain));
    let requests = env.api::<EvictionRequest>();
    let name = upstream::request_name("db-0", DRAIN_REQUESTER_KEY);
    wait::wait_for(&requests, &name, DEFAULT_TIMEOUT, "asked", |r| {
        r.spec.intent == INTENT_EVICTION
    })
    .await?;
    Api::<ClusterRoleBinding>::all(env.client.clone())
        .delete(&evictions, &DeleteParams::default())
        .await?;
    let run = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .context("the drain went on without being able to read")???;
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr.contains("listing lifecycle.k8s.io Evictions")
            && run.stderr.contains(&format!("{ns}/db-0")),
        "{run:?}"
    );
    let request = requests.get(&name).await?;
    assert_eq!(
        request.spec.intent,
        INTENT_WITHDRAWN,
        "{run:?}\ncontroller:\n{}",
        controller.log_tail(20)
    );
    controller.stop();
    Ok(())
}

/// Six namespaces with a pod each that its PDB keeps: the drain reads each kind once per round
/// for the whole cluster (not once per namespace), at most as fast as kubectl's client may
/// call (QPS 5, burst 10); `-o json` prints one object per change of a pod, each naming the
/// PDB that blocks it and how many more healthy pods it needs, and a summary that says what
/// was left, why, and that each request was withdrawn.
#[tokio::test]
async fn the_drain_reads_once_per_kind_and_names_each_pdb_in_json() -> Result<()> {
    let env = TestEnv::new("drain-json").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let (mut controller, node) = controller_and_node(&env).await?;
    let mut namespaces = Vec::new();
    for index in 0..6 {
        let namespace = format!("{}-{index}", env.namespace);
        Api::<Namespace>::all(env.client.clone())
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some(namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    ..Namespace::default()
                },
            )
            .await?;
        env.delete_on_drop::<Namespace>(&namespace);
        blocked_pod(&env, &namespace, &node, "web-0").await?;
        namespaces.push(namespace);
    }
    let account = "drainer";
    let identity = env.service_account(account, "cluster-admin").await?;
    let started = jiff::Timestamp::now();
    let run = run(env.plugin(
        &identity.kubeconfig,
        &["drain", &node, "--force", "--timeout", "10s", "-o", "json"],
    )?)
    .await?;
    assert_eq!(run.code, Some(3), "{run:?}");
    let lines = run.json_lines()?;
    for namespace in &namespaces {
        let pod = format!("{namespace}/web-0");
        let blocked = lines.iter().any(|l| {
            l["kind"] == "pod"
                && l["pod"] == pod.as_str()
                && l["blocker"]["kind"] == "PodDisruptionBudget"
                && l["blocker"]["name"] == "web-0"
                && l["blocker"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("needs 1 more healthy pod"))
        });
        assert!(blocked, "{pod}: {run:?}");
    }
    let summary = lines.last().context("no line")?;
    assert_eq!(summary["kind"], "summary", "{run:?}");
    assert_eq!(summary["result"], "timeout", "{run:?}");
    let left = summary["left"].as_array().context("left")?;
    assert_eq!(left.len(), 6, "{run:?}");
    assert!(
        left.iter()
            .all(|l| l["withdrawn"] == true && l["blocker"]["kind"] == "PodDisruptionBudget"),
        "{run:?}"
    );
    // Every LIST the drain made, from the audit log: cluster-wide for the requests and
    // Evictions, and no more than the client's limit lets through.
    let lists = lists_by(&env, &identity.username, started)?;
    let namespaced: Vec<&(String, Option<String>)> = lists
        .iter()
        .filter(|(resource, namespace)| resource != "pods" && namespace.is_some())
        .collect();
    assert!(namespaced.is_empty(), "per-namespace lists: {namespaced:?}");
    // 10 s at 5 a second after a burst of 10, for every call, not only lists.
    assert!(lists.len() <= 60, "{} lists: {lists:?}", lists.len());
    controller.stop();
    Ok(())
}

/// The LISTs `username` made since `since`: resource and namespace (None: cluster-wide).
fn lists_by(
    env: &TestEnv,
    username: &str,
    since: jiff::Timestamp,
) -> Result<Vec<(String, Option<String>)>> {
    let path = env.cluster_dir().join("audit.log");
    let log = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    Ok(log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["verb"] == "list"
                && e["user"]["username"] == username
                && e["requestReceivedTimestamp"]
                    .as_str()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .is_some_and(|t| t >= since)
        })
        .map(|e| {
            (
                e["objectRef"]["resource"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e["objectRef"]["namespace"].as_str().map(str::to_owned),
            )
        })
        .collect())
}

/// A pod on `node` holding finalizer `example.com/hold`, deleted so that it stays Terminating.
async fn terminating_pod(env: &TestEnv, node: &str, name: &str) -> Result<Pod> {
    let mut pod = pod_on(node, name, name);
    pod.metadata.finalizers = Some(vec![HOLD.to_owned()]);
    let pod = env.create(&pod).await?;
    env.wait_for_ready_pods(&format!("app={name}"), 1).await?;
    env.api::<Pod>()
        .delete(name, &DeleteParams::default())
        .await?;
    Ok(pod)
}

const HOLD: &str = "example.com/hold";
const BACKUP: &str = "example.com/backup";

/// Makes `node` a node whose kubelet stopped reporting, as the node lifecycle controller sees
/// one: its Ready condition Unknown and the unreachable taint. kwok leaves its status to the
/// test from then on ([`objects::CUSTOM_STATUS_ANNOTATION`]), so nothing reports it Ready again
/// and the controller keeps the taint (it lifts the taint from a node that is Ready). Written
/// again until it holds: a heartbeat kwok sent before it saw the annotation may land after.
async fn lose(env: &TestEnv, node: &str) -> Result<()> {
    let nodes = Api::<Node>::all(env.client.clone());
    let (key, value) = objects::CUSTOM_STATUS_ANNOTATION;
    let mut annotations = serde_json::Map::new();
    annotations.insert(key.to_owned(), json!(value));
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await?;
    let lost = |n: &Node| {
        let tainted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/unreachable"));
        let unknown = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Ready" && c.status == "Unknown")
            });
        tainted && unknown
    };
    for _ in 0..10 {
        let now = jiff::Timestamp::now().to_string();
        nodes
            .patch_status(
                node,
                &PatchParams::default(),
                &Patch::Strategic(json!({"status": {"conditions": [{
                    "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": now, "lastTransitionTime": now,
                }]}})),
            )
            .await?;
        nodes
            .patch(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": [
                    {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}})),
            )
            .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        if lost(&nodes.get(node).await?) {
            return Ok(());
        }
    }
    anyhow::bail!("node {node} is reported Ready again after 10 tries to mark it unreachable")
}

/// Lets the pods holding [`HOLD`] go, so the namespace can.
async fn release(env: &TestEnv, pods: &[&str]) -> Result<()> {
    for pod in pods {
        env.api::<Pod>()
            .patch(
                pod,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await?;
    }
    Ok(())
}

/// Every kind of blocker, named before anything is asked (`--dry-run`) and in what the drain
/// says it left: a PDB that needs one more healthy pod, a responder that acts first, a node
/// whose kubelet is unreachable (its taint), a terminating pod held by a finalizer. With
/// `--skip-wait-for-delete-timeout`, pods Terminating for longer count as gone and the drain
/// of that node ends.
#[tokio::test]
async fn each_blocker_is_named_in_the_dry_run_and_in_what_is_left() -> Result<()> {
    let env = TestEnv::new("drain-blockers").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let (mut controller, node) = controller_and_node(&env).await?;
    let lost = env
        .create_node(objects::node("lost", &[], vec![]))
        .await?
        .name_any();
    let ns = env.namespace.clone();
    blocked_pod(&env, &ns, &node, "db-0").await?;
    let mut backup = pod_on(&node, "backup-0", "backup-0");
    backup.spec.get_or_insert_default().eviction_responders = Some(vec![EvictionResponder {
        name: BACKUP.to_owned(),
        priority: 2000,
    }]);
    env.create(&backup).await?;
    terminating_pod(&env, &node, "held-0").await?;
    terminating_pod(&env, &lost, "gone-0").await?;
    env.wait_for_ready_pods("app=backup-0", 1).await?;
    lose(&env, &lost).await?;
    let kubeconfig = env.kubeconfig().to_owned();

    let dry = run(env.plugin(
        &kubeconfig,
        &["drain", &node, &lost, "--force", "--dry-run"],
    )?)
    .await?;
    assert_eq!(dry.code, Some(0), "{dry:?}");
    let says = |pod: &str, blocker: &str| {
        dry.stdout.lines().any(|l| {
            l.starts_with(&format!("pod/{ns}/{pod} would be asked"))
                && l.contains(&format!("blocked by {blocker}"))
        })
    };
    assert!(
        says(
            "db-0",
            "PDB db-0: needs 1 more healthy pod (currentHealthy 1"
        ) && says(
            "backup-0",
            &format!("responder {BACKUP} (no heartbeat yet)")
        ) && says("held-0", &format!("terminating, held by finalizers {HOLD}"))
            && says(
                "gone-0",
                // The controller adds the taint's NoSchedule twin beside it: either names it.
                &format!("node {lost} unreachable (taint node.kubernetes.io/unreachable:")
            ),
        "{dry:?}"
    );
    assert!(
        env.api::<EvictionRequest>()
            .list(&Default::default())
            .await?
            .items
            .is_empty(),
        "the dry run asked: {dry:?}"
    );

    let drained = run(env.plugin(
        &kubeconfig,
        &["drain", &node, &lost, "--force", "--timeout", "12s"],
    )?)
    .await?;
    assert_eq!(drained.code, Some(3), "{drained:?}");
    let left = |pod: &str, blocker: &str| {
        drained.stderr.lines().any(|l| {
            l.trim_start().starts_with(&format!("{ns}/{pod}: "))
                && l.contains(&format!("blocked by {blocker}"))
        })
    };
    assert!(
        left(
            "db-0",
            "PDB db-0: needs 1 more healthy pod (currentHealthy 1"
        ) && left("backup-0", &format!("responder {BACKUP}"))
            && left("held-0", &format!("terminating, held by finalizers {HOLD}"))
            && left("gone-0", &format!("node {lost} unreachable")),
        "{drained:?}\ncontroller:\n{}",
        controller.log_tail(30)
    );

    // A pod Terminating longer than the flag allows counts as gone: the lost node drains.
    let skipped = run(env.plugin(
        &kubeconfig,
        &[
            "drain",
            &lost,
            "--force",
            "--timeout",
            "30s",
            "--skip-wait-for-delete-timeout",
            "1",
        ],
    )?)
    .await?;
    assert_eq!(skipped.code, Some(0), "{skipped:?}");
    assert!(
        skipped.stdout.contains(&format!("node/{lost} drained")),
        "{skipped:?}"
    );
    release(&env, &["held-0", "gone-0"]).await?;
    controller.stop();
    Ok(())
}

/// A drain killed mid-way (no chance to withdraw) leaves its request asking and the node
/// cordoned; `kubectl evictkit uncordon` withdraws the request and makes the node schedulable.
#[tokio::test]
async fn uncordon_withdraws_what_a_killed_drain_asked() -> Result<()> {
    let env = TestEnv::new("drain-uncordon").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let (mut controller, node) = controller_and_node(&env).await?;
    let ns = env.namespace.clone();
    blocked_pod(&env, &ns, &node, "db-0").await?;
    env.wait_for_ready_pods("app=db-0", 1).await?;
    let kubeconfig = env.kubeconfig().to_owned();
    let mut drain =
        tokio::process::Command::from(env.plugin(&kubeconfig, &["drain", &node, "--force"])?)
            .kill_on_drop(true)
            .spawn()?;
    let requests = env.api::<EvictionRequest>();
    let name = upstream::request_name("db-0", DRAIN_REQUESTER_KEY);
    wait::wait_for(&requests, &name, DEFAULT_TIMEOUT, "asked", |r| {
        r.spec.intent == INTENT_EVICTION
    })
    .await?;
    drain.kill().await?;
    assert_eq!(requests.get(&name).await?.spec.intent, INTENT_EVICTION);

    let run = run(env.plugin(&kubeconfig, &["uncordon", &node])?).await?;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stdout
            .contains(&format!("pod/{ns}/db-0: EvictionRequest withdrawn"))
            && run.stdout.contains(&format!("node/{node} uncordoned")),
        "{run:?}"
    );
    assert_eq!(
        requests.get(&name).await?.spec.intent,
        INTENT_WITHDRAWN,
        "{run:?}"
    );
    let node = Api::<Node>::all(env.client.clone()).get(&node).await?;
    assert_ne!(
        node.spec.and_then(|s| s.unschedulable),
        Some(true),
        "{run:?}"
    );
    controller.stop();
    Ok(())
}

/// kubectl's connection flags, loaded as kubectl loads them: `--context` picks a context of
/// the kubeconfig (its current one points nowhere), `--as` impersonates (a user without rights
/// is refused, and the error says who), `--as-group` adds groups; `-l` drains the nodes its
/// selector matches; `--dry-run=server` has the apiserver answer for the cordon.
#[tokio::test]
async fn kubectl_connection_flags_and_node_selectors_work_as_in_kubectl() -> Result<()> {
    let env = TestEnv::new("drain-flags").await?;
    let ns = env.namespace.clone();
    let pool = [("pool", ns.as_str())];
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        nodes.push(
            env.create_node(objects::node(name, &pool, vec![]))
                .await?
                .name_any(),
        );
    }
    env.create_node(objects::node("other", &[], vec![])).await?;
    // The kubeconfig's current context points at nothing; "real" at the test cluster.
    let mut config = kube::config::Kubeconfig::read_from(env.kubeconfig())?;
    let mut context = config.contexts.first().context("a context")?.clone();
    let mut cluster = config.clusters.first().context("a cluster")?.clone();
    context.name = "real".to_owned();
    cluster.name = "nowhere".to_owned();
    cluster.cluster.as_mut().context("cluster")?.server = Some("https://127.0.0.1:1".to_owned());
    let mut nowhere = config.contexts.first().context("a context")?.clone();
    nowhere.name = "nowhere".to_owned();
    nowhere.context.as_mut().context("context")?.cluster = "nowhere".to_owned();
    config.contexts = vec![context, nowhere];
    config.clusters.push(cluster);
    config.current_context = Some("nowhere".to_owned());
    let kubeconfig = env.cluster_dir().join(format!("{ns}-contexts.kubeconfig"));
    std::fs::write(&kubeconfig, serde_json::to_string(&config)?)?;
    let selector = format!("pool={ns}");

    let drain = |extra: &[&str]| -> Vec<String> {
        [
            "drain",
            "-l",
            &selector,
            "--dry-run=server",
            "--force",
            "--api",
            "crd",
            "--eviction-api-fallback",
        ]
        .iter()
        .chain(extra)
        .map(|a| (*a).to_owned())
        .collect()
    };
    let args = drain(&["--context", "real"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dry = run(env.plugin(&kubeconfig, &args)?).await?;
    assert_eq!(dry.code, Some(0), "{dry:?}");
    assert_eq!(
        dry.stdout
            .lines()
            .filter(|l| l.ends_with("cordoned (dry run)"))
            .collect::<Vec<_>>(),
        nodes
            .iter()
            .map(|n| format!("node/{n} cordoned (dry run)"))
            .collect::<Vec<_>>(),
        "{dry:?}"
    );

    let unreachable = run(env.plugin(
        &kubeconfig,
        &drain(&[]).iter().map(String::as_str).collect::<Vec<_>>(),
    )?)
    .await?;
    assert_eq!(unreachable.code, Some(1), "{unreachable:?}");

    let nobody = format!("{ns}-nobody");
    let args = drain(&["--context", "real", "--as", &nobody]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let refused = run(env.plugin(&kubeconfig, &args)?).await?;
    assert_eq!(refused.code, Some(1), "{refused:?}");
    assert!(
        refused
            .stderr
            .contains(&format!("User \"{nobody}\" cannot list resource \"nodes\"")),
        "{refused:?}"
    );
    let args = drain(&[
        "--context",
        "real",
        "--as",
        &nobody,
        "--as-group",
        "system:masters",
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let admin = run(env.plugin(&kubeconfig, &args)?).await?;
    assert_eq!(admin.code, Some(0), "{admin:?}");
    for node in &nodes {
        let node = Api::<Node>::all(env.client.clone()).get(node).await?;
        assert_ne!(
            node.spec.and_then(|s| s.unschedulable),
            Some(true),
            "a dry run cordoned"
        );
    }
    Ok(())
}

/// The live view in a real terminal: tmux, 80 columns by 24 rows, a table of 30 pods whose
/// rows are wider than the screen (long names, the PDB's advice). Several redraws in, the
/// screen holds one table: one header, each line within the width (none wrapped), the rows
/// that fit and a `+N more` line, one progress bar. (Moving back by the lines printed, the
/// old view left wrapped halves and repeated headers on the screen.)
#[tokio::test]
async fn the_live_view_fits_a_terminal_of_80_columns() -> Result<()> {
    let tmux = Command::new("tmux").arg("-V").output();
    ensure!(
        tmux.is_ok_and(|o| o.status.success()),
        "this test needs tmux (Debian: apt-get install tmux)"
    );
    let env = TestEnv::new("drain-tmux").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    let app = "a-pod-with-a-name-long-enough-to-fill-a-terminal";
    for index in 0..30 {
        let mut pod = pod_on(&node, &format!("{app}-{index}"), app);
        pod.metadata.name = Some(format!("{app}-{index}"));
        env.create(&pod).await?;
    }
    env.wait_for_ready_pods(&format!("app={app}"), 30).await?;
    env.create(&objects::pdb(
        app,
        app,
        Budget::MinAvailable(IntOrString::Int(30)),
        None,
    ))
    .await?;
    env.wait_for_observed_budget(app, "currentHealthy=30", |s| s.current_healthy == Some(30))
        .await?;
    let command = env.plugin(
        env.kubeconfig(),
        &[
            "drain",
            &node,
            "--force",
            "--timeout",
            "30s",
            "--eviction-api-fallback",
        ],
    )?;
    let line = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|a| format!("'{}'", a.to_string_lossy()))
        .collect::<Vec<_>>()
        .join(" ");
    let path = command
        .get_envs()
        .find(|(k, _)| *k == "PATH")
        .and_then(|(_, v)| v)
        .context("PATH")?
        .to_string_lossy()
        .into_owned();
    let session = env.namespace.clone();
    let status = Command::new("tmux")
        .args(["new-session", "-d", "-s", &session, "-x", "80", "-y", "24"])
        .arg(format!("env -u KUBECONFIG PATH='{path}' {line}; sleep 60"))
        .status()?;
    ensure!(status.success(), "tmux new-session: {status}");
    // Asking for 30 pods at 5 calls a second, then redrawn every 2 s: a few times over.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let captured = Command::new("tmux")
        .args(["capture-pane", "-p", "-J", "-t", &session])
        .output()?;
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", &session])
        .status();
    let screen = String::from_utf8_lossy(&captured.stdout).into_owned();
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    let count = |prefix: &str| lines.iter().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(count("POD "), 1, "one header:\n{screen}");
    // The table, below the warning about pods without a controller (stderr, not redrawn).
    let header = lines
        .iter()
        .position(|l| l.starts_with("POD "))
        .unwrap_or_default();
    let lines = &lines[header..];
    assert_eq!(count("["), 1, "one progress bar:\n{screen}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with('+') && l.ends_with(" more")),
        "a +N more line:\n{screen}"
    );
    assert!(
        lines.iter().all(|l| l.chars().count() < 80),
        "no line wraps:\n{screen}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{}/{app}-0 ", env.namespace))),
        "rows of pods:\n{screen}"
    );
    Ok(())
}

/// `--escalate-after 4s --escalate=delete`: the pod its PDB keeps is deleted once the drain has
/// waited that long, the drain ends drained, and a Warning Event on the pod and one on its node
/// name who overrode which PDB. (Never by default: every other test here waits and withdraws.)
#[tokio::test]
async fn escalate_overrides_a_pdb_after_the_wait_with_a_warning_event() -> Result<()> {
    let env = TestEnv::new("drain-escalate").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let (mut controller, node) = controller_and_node(&env).await?;
    let ns = env.namespace.clone();
    blocked_pod(&env, &ns, &node, "db-0").await?;
    env.wait_for_ready_pods("app=db-0", 1).await?;
    let usage = run(env.plugin(
        env.kubeconfig(),
        &["drain", &node, "--escalate-after", "4s"],
    )?)
    .await?;
    assert_eq!(usage.code, Some(2), "--escalate-after alone: {usage:?}");
    let run = run(env.plugin(
        env.kubeconfig(),
        &[
            "drain",
            &node,
            "--force",
            "--timeout",
            "60s",
            "--escalate-after",
            "4s",
            "--escalate=delete",
        ],
    )?)
    .await?;
    assert_eq!(
        run.code,
        Some(0),
        "{run:?}\ncontroller:\n{}",
        controller.log_tail(20)
    );
    assert!(
        run.stdout.contains(&format!("node/{node} drained")),
        "{run:?}"
    );
    let events = Api::<k8s_openapi::api::core::v1::Event>::all(env.client.clone())
        .list(&Default::default())
        .await?
        .items;
    let overridden = |kind: &str, name: &str| {
        events.iter().any(|e| {
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some("DrainOverrodePodDisruptionBudget")
                && e.involved_object.kind.as_deref() == Some(kind)
                && e.involved_object.name.as_deref() == Some(name)
                && e.message.as_deref().is_some_and(|m| {
                    // Who (the test's admin), which PDB, what was done.
                    !m.starts_with(' ')
                        && m.contains(&format!(
                            " overrode PodDisruptionBudget {ns}/db-0: kubectl evictkit drain deleted pod {ns}/db-0"
                        ))
                        && m.ends_with("(--escalate=delete)")
                })
        })
    };
    assert!(
        overridden("Pod", "db-0") && overridden("Node", &node),
        "{run:?}\n{events:#?}"
    );
    controller.stop();
    Ok(())
}

/// Most drains here: an evictionrequest-controller on lifecycle.k8s.io for the test's namespace
/// and a kwok node `n` to drain.
async fn controller_and_node(
    env: &TestEnv,
) -> Result<(evictkit_harness::component::Component, String)> {
    let controller = env
        .start_eviction_request_controller_on("lifecycle")
        .await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    Ok((controller, node))
}

/// The detached drain's cluster: the NodeDrain CRD, an evictionrequest-controller on
/// lifecycle.k8s.io whose Lease is in the test's namespace (so it runs this test's NodeDrains
/// only), and a node with `db-0`, which its PDB keeps, and `web-0`, free to go.
async fn detached_drain_cluster(
    env: &TestEnv,
) -> Result<(evictkit_harness::component::Component, String)> {
    env.apply_crd("NodeDrain").await?;
    let (controller, node) = controller_and_node(env).await?;
    env.delete_on_drop::<NodeDrain>(&node);
    let ns = env.namespace.clone();
    blocked_pod(env, &ns, &node, "db-0").await?;
    env.create(&pod_on(&node, "web-0", "web-0")).await?;
    env.wait_for_ready_pods("app in (db-0, web-0)", 2).await?;
    Ok((controller, node))
}

/// `drain --detach` for the node of [`detached_drain_cluster`], with `extra` flags: it returns
/// at once, having created the NodeDrain.
async fn detach(env: &TestEnv, node: &str, extra: &[&str]) -> Result<()> {
    let ns = env.namespace.as_str();
    let mut args = vec![
        "drain",
        node,
        "--detach",
        "--force",
        "--controller-namespace",
        ns,
    ];
    args.extend_from_slice(extra);
    let run = run(env.plugin(env.kubeconfig(), &args)?).await?;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stdout.contains(&format!("nodedrain/{node} created")),
        "{run:?}"
    );
    Ok(())
}

/// `drain status NODE -o json` until `done` holds for its lines (pod lines, then the summary).
async fn status_until(
    env: &TestEnv,
    node: &str,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Result<Vec<Value>> {
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    loop {
        let run =
            run(env.plugin(env.kubeconfig(), &["drain", "status", node, "-o", "json"])?).await?;
        let lines = run.json_lines()?;
        if done(&lines) {
            return Ok(lines);
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "drain status never showed {what}: {run:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn pod_line<'a>(lines: &'a [Value], pod: &str) -> Option<&'a Value> {
    lines.iter().find(|l| l["kind"] == "pod" && l["pod"] == pod)
}

/// A drain that outlives its client: `drain --detach` returns at once and the controller
/// drains; `drain status -o json` names the PDB that keeps db-0 while web-0 is gone; `drain
/// wait` returns when the drain ends (exit 3 at its own --timeout while it goes on, 0 once
/// drained); an attached drain of the same node is refused meanwhile.
#[tokio::test]
async fn a_detached_drain_names_its_blocker_and_drain_wait_returns_when_done() -> Result<()> {
    let env = TestEnv::new("drain-detach").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let (mut controller, node) = detached_drain_cluster(&env).await?;
    let ns = env.namespace.clone();
    detach(&env, &node, &[]).await?;
    let db = format!("{ns}/db-0");
    let web = format!("{ns}/web-0");
    let lines = status_until(&env, &node, "db-0 blocked, web-0 gone", |lines| {
        pod_line(lines, &db).is_some_and(|l| {
            l["blocker"]["kind"] == "PodDisruptionBudget" && l["blocker"]["name"] == "db-0"
        }) && pod_line(lines, &web).is_some_and(|l| l["state"] == "Gone" || l["state"] == "Evicted")
    })
    .await
    .with_context(|| format!("controller:\n{}", controller.log_tail(30)))?;
    let summary = lines.last().context("no line")?;
    assert_eq!(summary["kind"], "summary", "{lines:?}");
    assert_eq!(summary["result"], Value::Null, "{lines:?}");
    assert_eq!(
        (summary["pods"].as_u64(), summary["gone"].as_u64()),
        (Some(2), Some(1))
    );

    let attached = run(env.plugin(env.kubeconfig(), &["drain", &node, "--force"])?).await?;
    assert_eq!(attached.code, Some(1), "{attached:?}");
    assert!(
        attached
            .stderr
            .contains(&format!("node {node} is being drained by nodedrain/{node}")),
        "{attached:?}"
    );

    let waiting = run(env.plugin(
        env.kubeconfig(),
        &["drain", "wait", &node, "--timeout", "3s", "-o", "json"],
    )?)
    .await?;
    assert_eq!(waiting.code, Some(3), "{waiting:?}");

    let following = tokio::spawn(run(
        env.plugin(env.kubeconfig(), &["drain", "wait", &node, "-o", "json"])?
    ));
    env.api::<PodDisruptionBudget>()
        .delete("db-0", &DeleteParams::default())
        .await?;
    let waited = tokio::time::timeout(DEFAULT_TIMEOUT, following)
        .await
        .context("drain wait did not return once the drain could end")???;
    assert_eq!(waited.code, Some(0), "{waited:?}");
    let lines = waited.json_lines()?;
    let summary = lines.last().context("no line")?;
    assert_eq!(summary["result"], "drained", "{waited:?}");
    assert_eq!(summary["gone"], 2, "{waited:?}");
    controller.stop();
    Ok(())
}

/// The timeout of a detached drain passes with no client running: the controller withdraws
/// its request, says so in the status, and `drain wait` exits as the attached drain would.
#[tokio::test]
async fn a_detached_drain_times_out_and_withdraws_with_no_client() -> Result<()> {
    let env = TestEnv::new("drain-detach-timeout").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let (mut controller, node) = detached_drain_cluster(&env).await?;
    let ns = env.namespace.clone();
    detach(&env, &node, &["--timeout", "8s"]).await?;
    let requests = env.api::<EvictionRequest>();
    let name = upstream::request_name("db-0", DRAIN_REQUESTER_KEY);
    wait::wait_for(&requests, &name, DEFAULT_TIMEOUT, "asked", |r| {
        r.spec.intent == INTENT_EVICTION
    })
    .await
    .with_context(|| format!("controller:\n{}", controller.log_tail(30)))?;
    wait::wait_for(&requests, &name, DEFAULT_TIMEOUT, "withdrawn", |r| {
        r.spec.intent == INTENT_WITHDRAWN
    })
    .await?;
    let lines = status_until(&env, &node, "the timeout", |lines| {
        lines.last().is_some_and(|s| s["result"] == "timeout")
    })
    .await?;
    let summary = lines.last().context("no line")?;
    let left = summary["left"].as_array().context("left")?;
    assert_eq!(left.len(), 1, "{lines:?}");
    assert_eq!(left[0]["pod"], format!("{ns}/db-0").as_str(), "{lines:?}");
    assert_eq!(left[0]["withdrawn"], true, "{lines:?}");
    assert_eq!(
        left[0]["blocker"]["kind"], "PodDisruptionBudget",
        "{lines:?}"
    );
    let waited = run(env.plugin(env.kubeconfig(), &["drain", "wait", &node])?).await?;
    assert_eq!(waited.code, Some(3), "{waited:?}");
    assert!(
        waited
            .stdout
            .contains(&format!("nodedrain/{node}: timeout")),
        "{waited:?}"
    );
    // The Events of a cluster-scoped object are in `default`.
    let events = Api::<Event>::namespaced(env.client.clone(), "default")
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=NodeDrain,involvedObject.name={node}"
        )))
        .await?;
    let reasons: Vec<(String, String)> = events
        .items
        .iter()
        .map(|e| {
            (
                e.type_.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
            )
        })
        .collect();
    for (kind, reason) in [("Normal", "DrainStarted"), ("Warning", "DrainTimedOut")] {
        assert!(
            reasons.contains(&(kind.to_owned(), reason.to_owned())),
            "{reasons:?}"
        );
    }
    controller.stop();
    Ok(())
}

/// A client following a drain (`drain wait`) killed mid-drain takes nothing with it: the drain
/// goes on, `drain status` reattaches and shows it, and `uncordon` takes it back: the
/// NodeDrain deleted, its request withdrawn, the node schedulable.
#[tokio::test]
async fn a_killed_client_reattaches_and_uncordon_withdraws_a_detached_drain() -> Result<()> {
    let env = TestEnv::new("drain-detach-kill").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let (mut controller, node) = detached_drain_cluster(&env).await?;
    let ns = env.namespace.clone();
    detach(&env, &node, &[]).await?;
    let mut following =
        tokio::process::Command::from(env.plugin(env.kubeconfig(), &["drain", "wait", &node])?)
            .kill_on_drop(true)
            .spawn()?;
    let requests = env.api::<EvictionRequest>();
    let name = upstream::request_name("db-0", DRAIN_REQUESTER_KEY);
    wait::wait_for(&requests, &name, DEFAULT_TIMEOUT, "asked", |r| {
        r.spec.intent == INTENT_EVICTION
    })
    .await
    .with_context(|| format!("controller:\n{}", controller.log_tail(30)))?;
    following.kill().await?;

    let db = format!("{ns}/db-0");
    let lines = status_until(&env, &node, "db-0 still asked for", |lines| {
        pod_line(lines, &db).is_some_and(|l| l["blocker"]["name"] == "db-0")
    })
    .await?;
    assert_eq!(
        lines.last().context("no line")?["result"],
        Value::Null,
        "{lines:?}"
    );
    assert_eq!(requests.get(&name).await?.spec.intent, INTENT_EVICTION);
    let text = run(env.plugin(env.kubeconfig(), &["drain", "status", &node])?).await?;
    assert_eq!(text.code, Some(0), "{text:?}");
    assert!(
        text.stdout
            .contains(&format!("nodedrain/{node}: draining for"))
            && text.stdout.contains("PodDisruptionBudget db-0"),
        "{text:?}"
    );

    let uncordon = run(env.plugin(env.kubeconfig(), &["uncordon", &node])?).await?;
    assert_eq!(uncordon.code, Some(0), "{uncordon:?}");
    assert!(
        uncordon
            .stdout
            .contains(&format!("nodedrain/{node} deleted"))
            && uncordon.stdout.contains(&format!("node/{node} uncordoned")),
        "{uncordon:?}"
    );
    wait::wait_for(&requests, &name, DEFAULT_TIMEOUT, "withdrawn", |r| {
        r.spec.intent == INTENT_WITHDRAWN
    })
    .await?;
    assert!(
        Api::<NodeDrain>::all(env.client.clone())
            .get_opt(&node)
            .await?
            .is_none(),
        "{uncordon:?}"
    );
    // Nothing cordons it again: the controller stopped with the NodeDrain.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let node = Api::<Node>::all(env.client.clone()).get(&node).await?;
    assert_ne!(
        node.spec.and_then(|s| s.unschedulable),
        Some(true),
        "{uncordon:?}"
    );
    controller.stop();
    Ok(())
}

/// A Running and Ready pod on `node` whose own terminationGracePeriodSeconds is 30 and which
/// finalizer [`HOLD`] keeps once deleted, so the grace period its deletion was given stays
/// there to be read (`metadata.deletionGracePeriodSeconds`). kwok leaves it alone (its status
/// is the test's): kwok deletes a deleted pod again with a grace period of 0, which would
/// shorten the one the drain gave.
async fn slow_held_pod(env: &TestEnv, node: &str, name: &str) -> Result<Pod> {
    let mut pod = pod_on(node, name, name);
    pod.metadata.finalizers = Some(vec![HOLD.to_owned()]);
    pod.metadata.annotations = Some(
        [(
            objects::CUSTOM_STATUS_ANNOTATION.0.to_owned(),
            objects::CUSTOM_STATUS_ANNOTATION.1.to_owned(),
        )]
        .into(),
    );
    pod.spec
        .get_or_insert_default()
        .termination_grace_period_seconds = Some(30);
    let pod = env.create(&pod).await?;
    let now = jiff::Timestamp::now().to_string();
    env.api::<Pod>()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            }})),
        )
        .await
        .with_context(|| format!("making pod {name} Ready"))?;
    Ok(pod)
}

/// The grace period the deletion of pod `name` was given, once it is deleted.
async fn deletion_grace_period(env: &TestEnv, name: &str) -> Result<Option<i64>> {
    let pod = wait::wait_for(&env.api::<Pod>(), name, DEFAULT_TIMEOUT, "deleted", |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .await?;
    Ok(pod.metadata.deletion_grace_period_seconds)
}

/// `body` in a cluster that serves no evictkit.io EvictionRequest CRD, so that `--api crd
/// --eviction-api-fallback` evicts through the Eviction API: the CRD, if another test file
/// installed it, is deleted for the test and installed again after. No other test of this file
/// uses it.
async fn without_the_request_crd(
    env: &TestEnv,
    body: impl std::future::Future<Output = Result<()>>,
) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let crd = "evictionrequests.evictkit.io";
    let installed = crds.get_opt(crd).await?.is_some();
    if installed {
        crds.delete(crd, &DeleteParams::default()).await?;
        wait::wait_for_deletion(&crds, crd, DEFAULT_TIMEOUT).await?;
    }
    let result = body.await;
    if installed {
        env.apply_crd("EvictionRequest").await?;
    }
    result
}

/// `--grace-period 0` with `--eviction-api-fallback`, as kubectl drain: each Eviction carries
/// `deleteOptions.gracePeriodSeconds: 0` (the audit log) and the pod, whose own grace period
/// is 30 s, is deleted with 0 (`deletionGracePeriodSeconds`); `-v=4` names each eviction with
/// the grace period it gave. Without the flag (-1, kubectl's default) the pod keeps its own.
#[tokio::test]
async fn the_grace_period_goes_with_each_eviction_of_the_fallback() -> Result<()> {
    let env = TestEnv::new("drain-grace-evict").await?;
    let ns = env.namespace.clone();
    let mut nodes = Vec::new();
    for (name, pod) in [("zero", "now-0"), ("own", "own-0")] {
        let node = env
            .create_node(objects::node(name, &[], vec![]))
            .await?
            .name_any();
        slow_held_pod(&env, &node, pod).await?;
        nodes.push(node);
    }
    let drain = |node: &str, extra: &[&str]| -> Result<Command> {
        let mut args = vec![
            "drain",
            node,
            "--force",
            "--api",
            "crd",
            "--eviction-api-fallback",
            "--timeout",
            "60s",
            // The finalizer holds each pod: the drain ends once it is deleted.
            "--skip-wait-for-delete-timeout",
            "1",
        ];
        args.extend_from_slice(extra);
        env.plugin(env.kubeconfig(), &args)
    };
    let (zero, own) = (nodes[0].clone(), nodes[1].clone());
    let result = without_the_request_crd(&env, async {
        let fast = run(drain(&zero, &["--grace-period", "0", "-v=4"])?).await?;
        assert_eq!(fast.code, Some(0), "{fast:?}");
        assert!(
            fast.stderr.contains(&format!(
                "\"Evicted\" pod=\"{ns}/now-0\" grace_period=\"0s\""
            )),
            "{fast:?}"
        );
        assert_eq!(deletion_grace_period(&env, "now-0").await?, Some(0));
        let slow = run(drain(&own, &[])?).await?;
        assert_eq!(slow.code, Some(0), "{slow:?}");
        assert_eq!(deletion_grace_period(&env, "own-0").await?, Some(30));
        Ok(())
    })
    .await;
    release(&env, &["now-0", "own-0"]).await?;
    result?;
    let asked: Vec<(String, Option<i64>)> = env
        .audit_events()?
        .iter()
        .filter(|e| {
            e.object_ref
                .as_ref()
                .is_some_and(|o| o.subresource.as_deref() == Some("eviction"))
        })
        .map(|e| {
            (
                e.object_ref
                    .as_ref()
                    .and_then(|o| o.name.clone())
                    .unwrap_or_default(),
                e.request_object
                    .as_ref()
                    .and_then(|b| b.pointer("/deleteOptions/gracePeriodSeconds"))
                    .and_then(Value::as_i64),
            )
        })
        .collect();
    assert_eq!(
        asked,
        [("now-0".to_owned(), Some(0)), ("own-0".to_owned(), None)],
        "the evictions in the audit log"
    );
    Ok(())
}

/// `--escalate=delete --grace-period 0`: the pod its PDB keeps is deleted with a grace period
/// of 0 (its own is 30 s), the Warning Event says so, and the drain says `--grace-period`
/// applies to nothing else (its EvictionRequests carry none).
#[tokio::test]
async fn an_escalation_deletes_with_the_grace_period() -> Result<()> {
    let env = TestEnv::new("drain-grace-escalate").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let (mut controller, node) = controller_and_node(&env).await?;
    let ns = env.namespace.clone();
    slow_held_pod(&env, &node, "db-0").await?;
    protect(&env, &ns, "db-0").await?;
    let run = run(env.plugin(
        env.kubeconfig(),
        &[
            "drain",
            &node,
            "--force",
            "--timeout",
            "60s",
            "--escalate-after",
            "2s",
            "--escalate=delete",
            "--grace-period",
            "0",
            "--skip-wait-for-delete-timeout",
            "1",
        ],
    )?)
    .await;
    let grace = deletion_grace_period(&env, "db-0").await;
    release(&env, &["db-0"]).await?;
    let run = run?;
    assert_eq!(
        run.code,
        Some(0),
        "{run:?}\ncontroller:\n{}",
        controller.log_tail(20)
    );
    assert_eq!(grace?, Some(0), "{run:?}");
    assert!(
        run.stderr.contains(
            "Warning: --grace-period 0 applies only to the pods --escalate deletes; an EvictionRequest carries no grace period"
        ),
        "{run:?}"
    );
    let events = env.api::<Event>().list(&Default::default()).await?.items;
    assert!(
        events.iter().any(|e| {
            e.reason.as_deref() == Some("DrainOverrodePodDisruptionBudget")
                && e.message
                    .as_deref()
                    .is_some_and(|m| m.ends_with("(--escalate=delete --grace-period=0)"))
        }),
        "{events:#?}"
    );
    controller.stop();
    Ok(())
}

/// `drain --detach --grace-period 0`: the NodeDrain carries it (`spec.gracePeriodSeconds`) and
/// the controller's escalation deletes the pod its PDB keeps with it.
#[tokio::test]
async fn a_detached_drain_carries_the_grace_period() -> Result<()> {
    let env = TestEnv::new("drain-grace-detach").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    env.apply_crd("NodeDrain").await?;
    let (mut controller, node) = controller_and_node(&env).await?;
    env.delete_on_drop::<NodeDrain>(&node);
    let ns = env.namespace.clone();
    slow_held_pod(&env, &node, "db-0").await?;
    protect(&env, &ns, "db-0").await?;
    let detached = detach(
        &env,
        &node,
        &[
            "--grace-period",
            "0",
            "--escalate-after",
            "2s",
            "--escalate=delete",
            "--skip-wait-for-delete-timeout",
            "1",
        ],
    )
    .await;
    let grace = match detached {
        Ok(()) => deletion_grace_period(&env, "db-0").await,
        Err(error) => Err(error),
    };
    release(&env, &["db-0"]).await?;
    let spec = serde_json::to_value(
        Api::<NodeDrain>::all(env.client.clone())
            .get(&node)
            .await?
            .spec,
    )?;
    assert_eq!(spec["gracePeriodSeconds"], 0, "{spec}");
    assert_eq!(
        grace.with_context(|| format!("controller:\n{}", controller.log_tail(30)))?,
        Some(0)
    );
    let waited = run(env.plugin(env.kubeconfig(), &["drain", "wait", &node])?).await?;
    assert_eq!(waited.code, Some(0), "{waited:?}");
    controller.stop();
    Ok(())
}

/// kubectl's `-v`, taken as kubectl takes it (`-v=6`, `-v 6`, `--v=6`, before or after the
/// command): at 6 each API call is a line on stderr (method, URL, status, milliseconds), at 4
/// the drain's decisions and no call, at 0 neither; stdout is the same at every level. A
/// grace period below -1 is a usage error, as in kubectl.
#[tokio::test]
async fn verbosity_logs_each_call_at_6_and_nothing_at_0() -> Result<()> {
    let env = TestEnv::new("drain-verbose").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    env.create(&pod_on(&node, "web-0", "web-0")).await?;
    env.wait_for_ready_pods("app=web-0", 1).await?;
    let dry = |verbosity: &[&str]| -> Result<Command> {
        let mut args = vec!["drain", node.as_str(), "--force", "--dry-run"];
        args.extend_from_slice(verbosity);
        env.plugin(env.kubeconfig(), &args)
    };
    let call = "\"Response\" verb=\"GET\" url=\"https://";
    let node_read = format!("/api/v1/nodes/{node}\" status=\"200 OK\" milliseconds=");
    let quiet = run(dry(&["-v", "0"])?).await?;
    assert_eq!(quiet.code, Some(0), "{quiet:?}");
    assert!(!quiet.stderr.contains("\"Response\""), "{quiet:?}");
    assert!(!quiet.stderr.contains("\"Channel\""), "{quiet:?}");
    for flag in [&["-v=6"][..], &["-v", "6"], &["--v=6"]] {
        let loud = run(dry(flag)?).await?;
        assert_eq!(loud.code, Some(0), "{flag:?}: {loud:?}");
        assert_eq!(loud.stdout, quiet.stdout, "{flag:?}");
        assert!(
            loud.stderr
                .lines()
                .any(|l| l.starts_with('I') && l.contains(call) && l.contains(&node_read)),
            "{flag:?}: {loud:?}"
        );
    }
    let decisions = run(dry(&["-v=4"])?).await?;
    assert!(
        decisions
            .stderr
            .contains("\"Channel\" through=\"lifecycle.k8s.io EvictionRequest\"")
            || decisions
                .stderr
                .contains("\"Channel\" through=\"evictkit.io EvictionRequest\""),
        "{decisions:?}"
    );
    assert!(!decisions.stderr.contains("\"Response\""), "{decisions:?}");
    // A global flag: before the command, and on another command.
    let requests = run(env.plugin(
        env.kubeconfig(),
        &["-v=6", "requests", "-n", &env.namespace],
    )?)
    .await?;
    assert_eq!(requests.code, Some(0), "{requests:?}");
    assert!(requests.stderr.contains(call), "{requests:?}");

    let refused = run(dry(&["--grace-period", "-2"])?).await?;
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert!(refused.stderr.contains("--grace-period"), "{refused:?}");
    Ok(())
}
