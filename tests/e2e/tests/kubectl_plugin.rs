//! `kubectl evictkit` run the way users run it: the control plane's own kubectl finds
//! `target/debug/kubectl-evictkit` on PATH (built by `cargo build --workspace --bins`, as the
//! components are). Checks what each subcommand prints and its exit code: 0 allowed or done,
//! 1 an error, 2 bad usage, 3 an eviction that would be refused (drain: pods left).

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use evictkit_api::eviction_request::EvictionRequest as CrdRequest;
use evictkit_api::keys::{
    DRAIN_REQUESTER_KEY, EVICTION_INTERCEPTORS, IMPERATIVE_EVICTOR_RESPONDER,
};
use evictkit_harness::TestEnv;
use evictkit_harness::objects::{self, Budget};
use evictkit_harness::wait::{self, DEFAULT_TIMEOUT};
use evictkit_runtime::clients::eviction_request::TargetPod;
use evictkit_runtime::clients::eviction_request::apis;
use evictkit_runtime::clients::eviction_request::crd::{InterceptorClient, request_eviction};
use evictkit_runtime::clients::eviction_request::upstream;
use evictkit_runtime::clients::eviction_request::upstream::{INTENT_EVICTION, INTENT_WITHDRAWN};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{EvictionResponder, Node, Pod};
use k8s_openapi::api::lifecycle::v1alpha1::{Eviction, EvictionRequest};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

const CRD_REQUESTER: &str = "drain.example.com";
const LIFECYCLE_REQUESTER: &str = "example.com/maintenance";

/// What one `kubectl evictkit ...` printed and how it exited.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `kubectl evictkit <args> --kubeconfig <the test cluster's>`, with target/debug first on PATH.
fn kubectl_evictkit(env: &TestEnv, args: &[&str]) -> Result<Run> {
    let output = plugin_command(env, args)?
        .output()
        .context("running kubectl evictkit")?;
    Ok(Run::of(&output))
}

/// The command [`kubectl_evictkit`] runs, for a test that does something while it runs.
fn plugin_command(env: &TestEnv, args: &[&str]) -> Result<Command> {
    env.plugin(env.kubeconfig(), args)
}

impl Run {
    fn of(output: &std::process::Output) -> Self {
        Self {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

fn pod_on(node: &str, name: &str, app: &str) -> Pod {
    let mut pod = objects::pod(name, app);
    pod.spec.get_or_insert_default().node_name = Some(node.to_owned());
    pod
}

#[tokio::test]
async fn each_subcommand_prints_its_answer_and_exits_with_its_code() -> Result<()> {
    let env = TestEnv::new("plugin").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    env.apply_crd("EvictionRequest").await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .metadata
        .name
        .unwrap_or_default();
    // web: two Ready pods under minAvailable 2, so neither may go; batch: no budget.
    for (name, app) in [("web-0", "web"), ("web-1", "web"), ("batch-0", "batch")] {
        env.create(&pod_on(&node, name, app)).await?;
    }
    env.wait_for_ready_pods("app=web", 2).await?;
    let batch = env.wait_for_ready_pods("app=batch", 1).await?.remove(0);
    env.create(&objects::pdb(
        "web",
        "web",
        Budget::MinAvailable(IntOrString::Int(2)),
        None,
    ))
    .await?;
    env.wait_for_observed_budget("web", "currentHealthy=2", |s| s.current_healthy == Some(2))
        .await?;
    let ns = env.namespace.as_str();

    let allowed = kubectl_evictkit(&env, &["explain", &format!("{ns}/batch-0")])?;
    assert_eq!(allowed.code, Some(0), "{allowed:?}");
    assert!(
        allowed.stdout.contains(&format!("{ns}/batch-0")) && allowed.stdout.contains("201 allowed"),
        "{allowed:?}"
    );

    let blocked = kubectl_evictkit(&env, &["explain", "web-0", "-n", ns])?;
    assert_eq!(blocked.code, Some(3), "{blocked:?}");
    assert!(
        blocked.stdout.contains("429 blocked")
            && blocked.stdout.contains("PDB web: minAvailable=2"),
        "{blocked:?}"
    );

    let unknown = kubectl_evictkit(&env, &["explain", &format!("{ns}/ghost")])?;
    assert_eq!(unknown.code, Some(1), "{unknown:?}");
    assert!(
        unknown.stderr.contains(&format!("reading pod {ns}/ghost")),
        "{unknown:?}"
    );

    let usage = kubectl_evictkit(&env, &["explain"])?;
    assert_eq!(usage.code, Some(2), "{usage:?}");

    // The node's three pods, as JSON; one of them blocked is enough for the blocked code.
    let drain = kubectl_evictkit(&env, &["drain-preview", &node, "-o", "json"])?;
    assert_eq!(drain.code, Some(3), "{drain:?}");
    let explanations: serde_json::Value = serde_json::from_str(&drain.stdout)
        .with_context(|| format!("drain-preview -o json printed {drain:?}"))?;
    let verdicts: Vec<(String, i64)> = explanations
        .as_array()
        .context("an array of explanations")?
        .iter()
        .map(|e| {
            (
                e["pod"].as_str().unwrap_or_default().to_owned(),
                e["prediction"]["code"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            (format!("{ns}/batch-0"), 201),
            (format!("{ns}/web-0"), 429),
            (format!("{ns}/web-1"), 429)
        ],
        "{drain:?}"
    );
    let no_node = kubectl_evictkit(&env, &["drain-preview", &format!("{node}-gone")])?;
    assert_eq!(no_node.code, Some(1), "{no_node:?}");

    // One request in each API: web-0's through evictkit.io, batch-0's through lifecycle.k8s.io
    // when the cluster serves it.
    let web_0 = env.api::<Pod>().get("web-0").await?;
    request_eviction(&env.client, &web_0, CRD_REQUESTER).await?;
    let lifecycle_served = apis::served(&env.client).await?;
    if lifecycle_served {
        upstream::set_intent(
            &env.client,
            &TargetPod::of(&batch)?,
            LIFECYCLE_REQUESTER,
            INTENT_EVICTION,
        )
        .await?;
    }
    let listed = kubectl_evictkit(&env, &["requests", "-n", ns])?;
    assert_eq!(listed.code, Some(0), "{listed:?}");
    let rows: Vec<Vec<&str>> = listed
        .stdout
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows.first().map(|header| header.join(" ")).as_deref(),
        Some("NAMESPACE POD API REQUESTERS ACTIVE INTERCEPTOR PHASE AGE"),
        "{listed:?}"
    );
    let row = |pod: &str| rows.iter().find(|row| row.get(1) == Some(&pod)).cloned();
    assert_eq!(
        row("web-0").map(|r| r[..6].to_vec()),
        Some(vec![
            ns,
            "web-0",
            "evictkit.io",
            CRD_REQUESTER,
            "<none>",
            "InProgress"
        ]),
        "{listed:?}"
    );
    if lifecycle_served {
        assert_eq!(
            row("batch-0").map(|r| r[..4].to_vec()),
            Some(vec![ns, "batch-0", "lifecycle.k8s.io", LIFECYCLE_REQUESTER]),
            "{listed:?}"
        );
    }
    let as_yaml = kubectl_evictkit(&env, &["requests", "-n", ns, "-o", "yaml"])?;
    assert_eq!(as_yaml.code, Some(0), "{as_yaml:?}");
    assert!(
        as_yaml.stdout.contains("kind: List")
            && as_yaml.stdout.contains("apiVersion: evictkit.io/v1alpha1"),
        "{as_yaml:?}"
    );

    // No --api: a cluster serving lifecycle.k8s.io may hold requests of evictkit.io's CRD too.
    let described = kubectl_evictkit(&env, &["describe", &format!("{ns}/web-0")])?;
    assert_eq!(described.code, Some(0), "{described:?}");
    assert!(
        described
            .stdout
            .contains(&format!("Requested by {CRD_REQUESTER}.")),
        "{described:?}"
    );
    if lifecycle_served {
        let described = kubectl_evictkit(&env, &["describe", "batch-0", "-n", ns])?;
        assert_eq!(described.code, Some(0), "{described:?}");
        assert!(
            described
                .stdout
                .contains(&format!("{LIFECYCLE_REQUESTER} wants {INTENT_EVICTION}")),
            "{described:?}"
        );
    }
    Ok(())
}

/// A pod on `node` with `responders` in `spec.evictionResponders` (lifecycle.k8s.io).
fn pod_with_responders(node: &str, name: &str, responders: &[(&str, i32)]) -> Pod {
    let mut pod = pod_on(node, name, name);
    pod.spec.get_or_insert_default().eviction_responders = Some(
        responders
            .iter()
            .map(|(name, priority)| EvictionResponder {
                name: (*name).to_owned(),
                priority: *priority,
            })
            .collect(),
    );
    pod
}

/// Plays responder `example.com/backup` of `pod`: once the pod's Eviction makes it Active,
/// heartbeats with `message`, then completes after a few seconds, as a backup that takes time
/// would. Its own entry of `.status.responders`, by server-side apply.
async fn play_backup(env: &TestEnv, pod: &Pod, message: &str) -> Result<()> {
    let evictions = env.api::<Eviction>();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let deadline = tokio::time::Instant::now() + DEFAULT_TIMEOUT;
    let eviction = loop {
        let active = evictions
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| {
                e.spec.target.pod.as_ref().is_some_and(|p| p.uid == uid)
                    && e.status
                        .as_ref()
                        .and_then(|s| s.target_responders.as_ref())
                        .is_some_and(|r| r.iter().any(|r| r.name == BACKUP && r.state == "Active"))
            });
        if let Some(eviction) = active {
            break eviction;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "{BACKUP} never became Active for pod {}",
            pod.name_any()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let write = |complete: bool| {
        let now = Time(Timestamp::from_second(Timestamp::now().as_second()).expect("a time"));
        let mut entry = json!({ "name": BACKUP, "message": message, "heartbeatTime": now });
        if complete {
            entry["completionTime"] = json!(now);
        }
        json!({
            "apiVersion": "lifecycle.k8s.io/v1alpha1",
            "kind": "Eviction",
            "metadata": { "name": eviction.name_any() },
            "status": { "responders": [entry] },
        })
    };
    let params = PatchParams::apply("example.com-backup").force();
    evictions
        .patch_status(&eviction.name_any(), &params, &Patch::Apply(write(false)))
        .await
        .context("the backup's heartbeat")?;
    // Long enough for the drain to show the heartbeat and the message.
    tokio::time::sleep(Duration::from_secs(4)).await;
    evictions
        .patch_status(&eviction.name_any(), &params, &Patch::Apply(write(true)))
        .await
        .context("the backup's completion")?;
    Ok(())
}

const BACKUP: &str = "example.com/backup";

/// `kubectl evictkit drain` over two nodes on the upstream API (the test cluster serves
/// lifecycle.k8s.io): unmanaged pods stop a drain without --force and nothing is asked; with
/// it, a pod whose responder (played here) backs up first goes once the responder completes,
/// a pod without responders goes at once, and a pod its PDB protects is still there at
/// --timeout: the drain withdraws its request, says what it left and exits 3; the nodes stay
/// cordoned.
#[tokio::test]
async fn drain_asks_through_eviction_requests_and_withdraws_what_it_leaves() -> Result<()> {
    let env = TestEnv::new("plugin-drain").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let mut controller = env
        .start_eviction_request_controller_on("lifecycle")
        .await?;
    let mut nodes = Vec::new();
    for name in ["a", "b"] {
        let node = env.create_node(objects::node(name, &[], vec![])).await?;
        nodes.push(node.metadata.name.unwrap_or_default());
    }
    let backup = env
        .create(&pod_with_responders(
            &nodes[0],
            "backup-0",
            &[(BACKUP, 2000)],
        ))
        .await?;
    env.create(&pod_on(&nodes[1], "web-0", "web")).await?;
    env.create(&pod_on(&nodes[1], "blocked-0", "blocked"))
        .await?;
    for app in ["backup-0", "web", "blocked"] {
        env.wait_for_ready_pods(&format!("app={app}"), 1).await?;
    }
    env.create(&objects::pdb(
        "blocked",
        "blocked",
        Budget::MinAvailable(IntOrString::Int(1)),
        None,
    ))
    .await?;
    env.wait_for_observed_budget("blocked", "currentHealthy=1", |s| {
        s.current_healthy == Some(1)
    })
    .await?;
    let ns = env.namespace.as_str();
    let drain = |extra: &[&str]| -> Vec<String> {
        ["drain", &nodes[0], &nodes[1]]
            .iter()
            .chain(extra)
            .map(|a| (*a).to_owned())
            .collect()
    };

    // Bare pods: refused without --force, and nothing asked.
    let args = drain(&[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let refused = kubectl_evictkit(&env, &args)?;
    assert_eq!(refused.code, Some(3), "{refused:?}");
    assert!(
        refused.stderr.contains("--force")
            && ["backup-0", "blocked-0", "web-0"]
                .iter()
                .all(|pod| refused.stderr.contains(&format!("{ns}/{pod}"))),
        "{refused:?}"
    );
    let requests = env.api::<EvictionRequest>();
    assert!(
        requests
            .list(&ListParams::default())
            .await?
            .items
            .is_empty(),
        "{refused:?}"
    );

    let args = drain(&["--force", "--timeout", "40s"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let running = tokio::process::Command::from(plugin_command(&env, &args)?)
        .kill_on_drop(true)
        .output();
    let (output, played) = tokio::join!(running, play_backup(&env, &backup, "copying 3 GiB"));
    let run = Run::of(&output.context("running kubectl evictkit drain")?);
    played.with_context(|| format!("{run:?}\ncontroller:\n{}", controller.log_tail(40)))?;
    assert_eq!(run.code, Some(3), "{run:?}");
    // Piped: plain lines, one per change of a pod.
    assert!(
        run.stdout.lines().any(
            |l| l.contains(&format!("{ns}/backup-0 InProgress by {BACKUP}"))
                && l.ends_with(": copying 3 GiB")
        ),
        "{run:?}"
    );
    for pod in ["backup-0", "web-0"] {
        assert!(
            run.stdout
                .lines()
                .any(|l| l.contains(&format!("{ns}/{pod} Gone"))
                    || l.contains(&format!("{ns}/{pod} Evicted"))),
            "{pod}: {run:?}"
        );
    }
    assert!(
        run.stderr
            .contains("--timeout 40s passed; left on the node:")
            && run.stderr.lines().any(|l| l.contains(&format!(
                "{ns}/blocked-0: InProgress, {IMPERATIVE_EVICTOR_RESPONDER} active"
            )) && l.ends_with("its EvictionRequest is withdrawn")),
        "{run:?}"
    );
    // What it says holds: the blocked pod stays with its request withdrawn, the others are
    // gone, the nodes stay cordoned.
    env.api::<Pod>().get("blocked-0").await?;
    let withdrawn = requests
        .get(&upstream::request_name("blocked-0", DRAIN_REQUESTER_KEY))
        .await?;
    assert_eq!(withdrawn.spec.intent, INTENT_WITHDRAWN, "{run:?}");
    for pod in ["backup-0", "web-0"] {
        assert!(
            env.api::<Pod>().get_opt(pod).await?.is_none(),
            "{pod}: {run:?}"
        );
    }
    // Drained again: the withdrawn request is asked for anew, not read as the earlier
    // cancellation's Failed.
    let args = drain(&["--force", "--timeout", "6s"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let again = kubectl_evictkit(&env, &args)?;
    assert_eq!(again.code, Some(3), "{again:?}");
    assert!(
        again.stderr.contains("--timeout 6s passed")
            && again
                .stderr
                .contains(&format!("{ns}/blocked-0: InProgress"))
            && !again.stdout.contains("Failed"),
        "{again:?}"
    );
    for node in &nodes {
        let node = Api::<Node>::all(env.client.clone()).get(node).await?;
        assert_eq!(
            node.spec.and_then(|s| s.unschedulable),
            Some(true),
            "{run:?}"
        );
    }
    controller.stop();
    Ok(())
}

const SURGE: &str = "surge.example.com";

/// `kubectl evictkit drain --api crd` on evictkit.io's CRD: a pod whose interceptor (played by
/// the test through the runtime's InterceptorClient) reports before it completes, and a pod
/// without interceptors; the drain shows the interceptor's word and ends with every pod gone:
/// `node/N drained`, exit 0.
#[tokio::test]
async fn drain_through_the_crd_waits_for_the_interceptor() -> Result<()> {
    let env = TestEnv::new("plugin-drain-crd").await?;
    let _controller = env.start_eviction_request_controller().await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .metadata
        .name
        .unwrap_or_default();
    let mut intercepted = pod_on(&node, "surge-0", "surge");
    intercepted
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(EVICTION_INTERCEPTORS.into(), SURGE.into());
    let intercepted = env.create(&intercepted).await?;
    env.create(&pod_on(&node, "web-0", "web")).await?;
    for app in ["surge", "web"] {
        env.wait_for_ready_pods(&format!("app={app}"), 1).await?;
    }
    let interceptor = async {
        let surge = InterceptorClient::new(env.client.clone(), SURGE);
        let name = intercepted.metadata.uid.clone().unwrap_or_default();
        let request = wait::wait_for(
            &env.api::<CrdRequest>(),
            &name,
            DEFAULT_TIMEOUT,
            "surge.example.com active",
            |r| surge.is_active(r),
        )
        .await?;
        let request = surge
            .heartbeat(&request, "starting a surge pod", None)
            .await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        surge.complete(&request, "surge pod ready").await?;
        anyhow::Ok(())
    };
    let running = tokio::process::Command::from(plugin_command(
        &env,
        &[
            "drain",
            &node,
            "--api",
            "crd",
            "--force",
            "--timeout",
            "60s",
        ],
    )?)
    .kill_on_drop(true)
    .output();
    let (output, played) = tokio::join!(running, interceptor);
    let run = Run::of(&output.context("running kubectl evictkit drain")?);
    played.with_context(|| format!("{run:?}"))?;
    assert_eq!(run.code, Some(0), "{run:?}");
    let ns = env.namespace.as_str();
    assert!(
        run.stdout.lines().any(
            |l| l.contains(&format!("{ns}/surge-0 InProgress by {SURGE}"))
                && l.ends_with(": starting a surge pod")
        ) && run.stdout.contains(&format!("node/{node} drained")),
        "{run:?}"
    );
    for pod in ["surge-0", "web-0"] {
        assert!(
            env.api::<Pod>().get_opt(pod).await?.is_none(),
            "{pod}: {run:?}"
        );
    }
    Ok(())
}

/// `kubectl evictkit drain` in `--api auto` asks through the API the evictionrequest-controller
/// serves, as its Lease in `--controller-namespace` says: on a cluster serving lifecycle.k8s.io
/// whose controller serves only the CRD (not upgraded yet), through the CRD, and the node is
/// drained.
#[tokio::test]
async fn drain_in_auto_follows_the_controller() -> Result<()> {
    let env = TestEnv::new("plugin-drain-follows").await?;
    if env.skip_without_lifecycle_api().await? {
        return Ok(());
    }
    let _controller = env.start_eviction_request_controller().await?;
    wait::wait_for(
        &env.api::<k8s_openapi::api::coordination::v1::Lease>(),
        evictkit_runtime::clients::eviction_request::requester::CONTROLLER_LEASE,
        DEFAULT_TIMEOUT,
        "said what it serves",
        |l| {
            l.metadata.annotations.as_ref().is_some_and(|a| {
                a.contains_key(evictkit_runtime::clients::eviction_request::requester::SERVED_APIS)
            })
        },
    )
    .await?;
    let node = env
        .create_node(objects::node("n", &[], vec![]))
        .await?
        .name_any();
    env.create(&pod_on(&node, "web-0", "web")).await?;
    env.wait_for_ready_pods("app=web", 1).await?;
    let ns = env.namespace.as_str();
    let run = kubectl_evictkit(
        &env,
        &[
            "drain",
            &node,
            "--controller-namespace",
            ns,
            "--force",
            "--timeout",
            "60s",
        ],
    )?;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        env.api::<Pod>().get_opt("web-0").await?.is_none(),
        "{run:?}"
    );
    let asked: Vec<(String, String)> = env
        .audit_events()?
        .into_iter()
        .filter(|e| e.verb == "create" || e.verb == "patch")
        .filter_map(|e| {
            let o = e.object_ref?;
            (o.resource.as_deref() == Some("evictionrequests"))
                .then(|| (o.api_group.unwrap_or_default(), e.verb))
        })
        .collect();
    ensure!(
        !asked.is_empty() && asked.iter().all(|(group, _)| group == "evictkit.io"),
        "the drain asked through the CRD only: {asked:?}"
    );
    Ok(())
}
