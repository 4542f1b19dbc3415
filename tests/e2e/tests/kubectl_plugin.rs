//! `kubectl evictkit` run the way users run it: the control plane's own kubectl finds
//! `target/debug/kubectl-evictkit` on PATH (built by `cargo build --workspace --bins`, as the
//! components are). Checks what each subcommand prints and its exit code: 0 allowed or done,
//! 1 an error, 2 bad usage, 3 an eviction that would be refused.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use evictkit_runtime::eviction_request::{TargetPod, request_eviction};
use evictkit_runtime::lifecycle_request::{self, INTENT_EVICTION};
use evictkit_testenv::TestEnv;
use evictkit_testenv::objects::{self, Budget};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

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
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .context("tests/e2e is two levels below the workspace root")?;
    let plugin_dir = root.join("target/debug");
    anyhow::ensure!(
        plugin_dir.join("kubectl-evictkit").exists(),
        "no {}/kubectl-evictkit: run cargo build --workspace --bins",
        plugin_dir.display()
    );
    let path = std::env::join_paths(std::iter::once(plugin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))?;
    let kubeconfig = env.kubeconfig().to_string_lossy().into_owned();
    let output = Command::new(env.control_plane_bin("kubectl")?)
        .arg("evictkit")
        .args(args)
        .args(["--kubeconfig", &kubeconfig])
        .env("PATH", path)
        // The plugin must take the cluster from --kubeconfig, not from the environment.
        .env_remove("KUBECONFIG")
        .output()
        .context("running kubectl evictkit")?;
    Ok(Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
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
    let lifecycle_served = lifecycle_request::served(&env.client).await?;
    if lifecycle_served {
        lifecycle_request::set_intent(
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
