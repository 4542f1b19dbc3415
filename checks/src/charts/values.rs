//! The values users of Kubernetes charts expect, each rendered through the umbrella with every
//! component on (so each subchart's templates and schema apply), checked on the rendered
//! objects, and the output passed through a server-side dry-run apply: `global.*` merged with
//! each chart's own, `image.digest`, `logLevel`, `crds.*`, `hostNetwork` with the webhook and
//! metrics ports, and the ClusterRoles that aggregate to the default view, edit and admin roles,
//! which are also applied for real to see that a user bound to `view` may read EvictionRequests.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::render::{NAMESPACE, helm, read_yaml};
use super::umbrella::Block;
use evictkit_harness::cluster::Cluster;

/// A digest for `image.digest`: any 64 hex digits render.
macro_rules! digest {
    () => {
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    };
}
const DIGEST: &str = digest!();

/// The CRDs evictkit's charts install, by the kind the aggregated roles grant.
const CRD_RESOURCES: [&str; 3] = [
    "evictionrequests",
    "poddisruptionbudgetpolicies",
    "taintevictionpolicies",
];

type Check = fn(&Rendered) -> Result<()>;

/// One value (or a few that belong together) and what the rendered objects must show.
struct Case {
    what: &'static str,
    /// `--set` values, `{block}` standing for each component block in turn.
    each_block: &'static [&'static str],
    /// `--set` values given once.
    once: &'static [&'static str],
    check: Check,
}

const CASES: &[Case] = &[
    Case {
        what: "defaults: RUST_LOG=info, CRDs installed and kept, ports 8443 and 8080, no host network, aggregated roles",
        each_block: &[],
        once: &[],
        check: defaults,
    },
    Case {
        what: "global.commonLabels and commonLabels on every object and pod template, never in a selector",
        each_block: &[],
        once: &[
            "global.commonLabels.team=platform",
            "affinityEvictor.commonLabels.tier=evictor",
        ],
        check: common_labels,
    },
    Case {
        what: "global.imagePullSecrets, nodeSelector, tolerations and priorityClassName merged with each chart's own",
        each_block: &[],
        once: &[
            "global.imagePullSecrets[0].name=global-pull",
            "global.nodeSelector.pool=system",
            "global.tolerations[0].key=dedicated,global.tolerations[0].operator=Exists",
            "global.priorityClassName=evictkit-critical",
            "affinityEvictor.imagePullSecrets[0].name=own-pull",
            "affinityEvictor.nodeSelector.zone=a,affinityEvictor.nodeSelector.pool=evictor",
            "affinityEvictor.tolerations[0].key=own,affinityEvictor.tolerations[0].operator=Exists",
            "affinityEvictor.priorityClassName=own-class",
        ],
        check: global_scheduling,
    },
    Case {
        what: "image.digest replaces the tag",
        each_block: &[concat!("{block}.image.digest=", digest!())],
        once: &[],
        check: image_digest,
    },
    Case {
        what: "logLevel is RUST_LOG",
        each_block: &["{block}.logLevel=debug"],
        once: &["deschedulerBridge.env[0].name=RUST_LOG,deschedulerBridge.env[0].value=warn"],
        check: log_level,
    },
    Case {
        what: "crds.keep=false drops helm.sh/resource-policy",
        each_block: &["{block}.crds.keep=false"],
        once: &[],
        check: crds_not_kept,
    },
    Case {
        what: "crds.install=false renders no CRD",
        each_block: &["{block}.crds.install=false"],
        once: &[],
        check: no_crds,
    },
    Case {
        what: "hostNetwork with webhook.port 10260 and metrics.port 10261",
        each_block: &[
            "{block}.hostNetwork=true",
            "{block}.webhook.port=10260",
            "{block}.metrics.port=10261",
        ],
        once: &[],
        check: host_network,
    },
    Case {
        what: "rbac.aggregateClusterRoles=false renders no aggregated role",
        each_block: &["{block}.rbac.aggregateClusterRoles=false"],
        once: &[],
        check: no_aggregated_roles,
    },
];

/// Every case (each failure reported, not only the first), then the aggregated roles applied
/// for real.
pub(super) fn check(
    cluster: &Cluster,
    umbrella: &Path,
    enable_all: &str,
    blocks: &[Block],
) -> Result<()> {
    let failures: Vec<String> = CASES
        .iter()
        .filter_map(|case| {
            check_case(cluster, umbrella, enable_all, blocks, case)
                .err()
                .map(|error| format!("{error:#}"))
        })
        .collect();
    if !failures.is_empty() {
        bail!(
            "{} of {} value cases failed:\n{}",
            failures.len(),
            CASES.len(),
            failures.join("\n")
        );
    }
    let text = helm(
        cluster,
        &[
            "template",
            "evictkit",
            "--namespace",
            NAMESPACE,
            "--set",
            enable_all,
        ],
        umbrella,
    )?;
    roles_aggregate(cluster, &Rendered::parse(&text)?)
}

/// One case rendered through the umbrella, checked, and dry-run on the server.
fn check_case(
    cluster: &Cluster,
    umbrella: &Path,
    enable_all: &str,
    blocks: &[Block],
    case: &Case,
) -> Result<()> {
    let mut set = vec![enable_all.to_owned()];
    for block in blocks {
        let values = values_for(case, block)?;
        if !values.is_empty() {
            set.push(values);
        }
    }
    set.extend(case.once.iter().map(|value| (*value).to_owned()));
    let set = set.join(",");
    let text = helm(
        cluster,
        &[
            "template",
            "evictkit",
            "--namespace",
            NAMESPACE,
            "--set",
            &set,
        ],
        umbrella,
    )
    .with_context(|| case.what)?;
    let rendered = Rendered::parse(&text)?;
    (case.check)(&rendered).with_context(|| format!("{} (--set {set})", case.what))?;
    cluster
        .kubectl_stdin(
            &["apply", "--server-side", "--dry-run=server", "-f", "-"],
            &text,
        )
        .with_context(|| format!("server-side dry-run: {}", case.what))?;
    eprintln!("    chart evictkit: {}: rendered and dry-run ok", case.what);
    Ok(())
}

/// A case's per-block values for one block; those a block's chart has no key for are left
/// out (a controller has no webhook port, only a CRD's owner has `crds` and `rbac`), so its
/// schema does not refuse them.
fn values_for(case: &Case, block: &Block) -> Result<String> {
    let values = read_yaml(
        &evictkit_harness::workspace_root()
            .join("charts")
            .join(&block.chart)
            .join("values.yaml"),
    )?;
    let values: Vec<String> = case
        .each_block
        .iter()
        .map(|value| value.replace("{block}", &block.block))
        .filter(|value| {
            let top = value.split(['.', '=']).nth(1).unwrap_or_default();
            match top {
                "webhook" => values["webhook"]["enabled"] == Value::Bool(true),
                "crds" | "rbac" => values.get(top).is_some(),
                _ => true,
            }
        })
        .collect();
    Ok(values.join(","))
}

/// The rendered objects.
struct Rendered {
    objects: Vec<Value>,
}

impl Rendered {
    fn parse(text: &str) -> Result<Self> {
        let mut objects = Vec::new();
        for document in text.split("\n---") {
            let has_content = document
                .lines()
                .any(|line| !line.trim().is_empty() && !line.trim_start().starts_with('#'));
            if !has_content {
                continue;
            }
            let object: Value =
                serde_saphyr::from_str(document).context("parsing a rendered document")?;
            if !object.is_null() {
                objects.push(object);
            }
        }
        Ok(Self { objects })
    }

    fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects
            .iter()
            .filter(move |object| object["kind"] == kind)
    }

    fn deployments(&self) -> Result<Vec<&Value>> {
        let deployments: Vec<&Value> = self.of_kind("Deployment").collect();
        ensure!(
            deployments.len() == 5,
            "{} Deployments, not 5",
            deployments.len()
        );
        Ok(deployments)
    }
}

fn name(object: &Value) -> String {
    format!(
        "{} {}",
        object["kind"].as_str().unwrap_or("?"),
        object["metadata"]["name"].as_str().unwrap_or("?")
    )
}

fn component(object: &Value) -> &str {
    object["metadata"]["labels"]["app.kubernetes.io/component"]
        .as_str()
        .unwrap_or_default()
}

fn container(deployment: &Value) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][0]
}

fn env_values<'a>(deployment: &'a Value, variable: &str) -> Vec<&'a str> {
    container(deployment)["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|env| env["name"] == variable)
        .filter_map(|env| env["value"].as_str())
        .collect()
}

fn args(deployment: &Value) -> Vec<&str> {
    container(deployment)["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn container_port(deployment: &Value, port: &str) -> Option<i64> {
    container(deployment)["ports"]
        .as_array()?
        .iter()
        .find(|entry| entry["name"] == port)?["containerPort"]
        .as_i64()
}

fn crds(rendered: &Rendered) -> Vec<&Value> {
    rendered.of_kind("CustomResourceDefinition").collect()
}

/// ClusterRoles carrying `rbac.authorization.k8s.io/aggregate-to-<role>: "true"`.
fn aggregated_to<'a>(rendered: &'a Rendered, role: &str) -> Vec<&'a Value> {
    let label = format!("rbac.authorization.k8s.io/aggregate-to-{role}");
    rendered
        .of_kind("ClusterRole")
        .filter(|object| object["metadata"]["labels"][&label] == "true")
        .collect()
}

/// The verbs a set of roles grants on `resource` in evictkit.io.
fn verbs_on(roles: &[&Value], resource: &str) -> Vec<String> {
    let mut verbs: Vec<String> = roles
        .iter()
        .flat_map(|role| role["rules"].as_array().into_iter().flatten())
        .filter(|rule| {
            rule["apiGroups"]
                .as_array()
                .is_some_and(|groups| groups.iter().any(|g| g == "evictkit.io"))
                && rule["resources"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|r| r == resource))
        })
        .flat_map(|rule| rule["verbs"].as_array().into_iter().flatten())
        .filter_map(|verb| verb.as_str().map(str::to_owned))
        .collect();
    verbs.sort();
    verbs.dedup();
    verbs
}

fn defaults(rendered: &Rendered) -> Result<()> {
    for deployment in rendered.deployments()? {
        let log = env_values(deployment, "RUST_LOG");
        ensure!(
            log == ["info"],
            "{}: RUST_LOG {log:?}, not [info]",
            name(deployment)
        );
        let spec = &deployment["spec"]["template"]["spec"];
        ensure!(
            spec["hostNetwork"].is_null() && spec["dnsPolicy"].is_null(),
            "{}: hostNetwork or dnsPolicy set by default",
            name(deployment)
        );
        ensure!(
            container_port(deployment, "metrics") == Some(8080),
            "{}: the metrics port is not 8080",
            name(deployment)
        );
        let webhook = container_port(deployment, "webhook");
        ensure!(
            webhook.is_none() || webhook == Some(8443),
            "{}: the webhook port is {webhook:?}, not 8443",
            name(deployment)
        );
    }
    let crds = crds(rendered);
    // Every CRD a chart owns (crates/api's kinds, each rendered by its component's chart).
    let owned = crate::crds::CHART_OWNERS.len();
    ensure!(
        crds.len() == owned,
        "{} CRDs rendered, not {owned}",
        crds.len()
    );
    for crd in crds {
        ensure!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep",
            "{} is not kept",
            name(crd)
        );
        ensure!(
            !component(crd).is_empty(),
            "{} carries no chart labels",
            name(crd)
        );
    }
    let view = aggregated_to(rendered, "view");
    let edit = aggregated_to(rendered, "edit");
    let admin = aggregated_to(rendered, "admin");
    for resource in CRD_RESOURCES {
        let viewing = verbs_on(&view, resource);
        ensure!(
            viewing == ["get", "list", "watch"],
            "view aggregates {viewing:?} on {resource}"
        );
        for (role, roles) in [("edit", &edit), ("admin", &admin)] {
            let editing = verbs_on(roles, resource);
            ensure!(
                editing
                    == [
                        "create", "delete", "get", "list", "patch", "update", "watch"
                    ],
                "{role} aggregates {editing:?} on {resource}"
            );
        }
    }
    Ok(())
}

/// Selectors of an object: a Deployment's, a Service's, a PodDisruptionBudget's and the pod
/// template's topology spread constraints'.
fn selectors(object: &Value) -> Vec<&Value> {
    let spec = &object["spec"];
    let mut selectors = vec![&spec["selector"]];
    for constraint in spec["template"]["spec"]["topologySpreadConstraints"]
        .as_array()
        .into_iter()
        .flatten()
    {
        selectors.push(&constraint["labelSelector"]);
    }
    selectors
}

fn common_labels(rendered: &Rendered) -> Result<()> {
    ensure!(
        rendered.of_kind("ConfigMap").count() > 0,
        "the dashboard ConfigMap is not rendered"
    );
    for object in &rendered.objects {
        let labels = &object["metadata"]["labels"];
        ensure!(
            labels["team"] == "platform",
            "{} lacks team=platform",
            name(object)
        );
        let own = component(object) == "affinity-evictor";
        ensure!(
            (labels["tier"] == "evictor") == own,
            "{}: tier={} (the affinity-evictor's own commonLabels)",
            name(object),
            labels["tier"]
        );
        let template = &object["spec"]["template"]["metadata"]["labels"];
        if object["kind"] == "Deployment" {
            ensure!(
                template["team"] == "platform" && (template["tier"] == "evictor") == own,
                "{}: the pod template's labels lack the common labels",
                name(object)
            );
        }
        for selector in selectors(object) {
            let text = selector.to_string();
            ensure!(
                !text.contains("team") && !text.contains("tier"),
                "{}: a common label in a selector: {text}",
                name(object)
            );
        }
    }
    Ok(())
}

fn global_scheduling(rendered: &Rendered) -> Result<()> {
    for deployment in rendered.deployments()? {
        let spec = &deployment["spec"]["template"]["spec"];
        let pull: Vec<&str> = spec["imagePullSecrets"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|secret| secret["name"].as_str())
            .collect();
        let tolerations: Vec<&str> = spec["tolerations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|toleration| toleration["key"].as_str())
            .collect();
        let selector = &spec["nodeSelector"];
        let class = spec["priorityClassName"].as_str().unwrap_or_default();
        let (want_pull, want_tolerations, want_class, pool): (&[&str], &[&str], &str, &str) =
            match component(deployment) {
                "affinity-evictor" => (
                    &["global-pull", "own-pull"],
                    &["dedicated", "own"],
                    "own-class",
                    "evictor",
                ),
                // Its own default, system-cluster-critical, is set and wins.
                "taint-manager" => (
                    &["global-pull"],
                    &["dedicated"],
                    "system-cluster-critical",
                    "system",
                ),
                _ => (
                    &["global-pull"],
                    &["dedicated"],
                    "evictkit-critical",
                    "system",
                ),
            };
        let got_zone = component(deployment) == "affinity-evictor";
        ensure!(
            pull == want_pull
                && tolerations == want_tolerations
                && class == want_class
                && selector["pool"] == pool
                && (selector["zone"] == "a") == got_zone,
            "{}: imagePullSecrets {pull:?}, tolerations {tolerations:?}, priorityClassName \
             {class:?}, nodeSelector {selector}",
            name(deployment)
        );
    }
    Ok(())
}

fn image_digest(rendered: &Rendered) -> Result<()> {
    for deployment in rendered.deployments()? {
        let image = container(deployment)["image"].as_str().unwrap_or_default();
        let expected = format!("ghcr.io/evictkit/{}@{DIGEST}", component(deployment));
        ensure!(
            image == expected,
            "{}: image {image}, not {expected}",
            name(deployment)
        );
    }
    Ok(())
}

fn log_level(rendered: &Rendered) -> Result<()> {
    for deployment in rendered.deployments()? {
        let log = env_values(deployment, "RUST_LOG");
        // The descheduler-bridge's env names RUST_LOG itself, which wins.
        let expected = if component(deployment) == "descheduler-bridge" {
            "warn"
        } else {
            "debug"
        };
        ensure!(
            log == [expected],
            "{}: RUST_LOG {log:?}, not [{expected}]",
            name(deployment)
        );
    }
    Ok(())
}

fn crds_not_kept(rendered: &Rendered) -> Result<()> {
    let crds = crds(rendered);
    // Every CRD a chart owns (crates/api's kinds, each rendered by its component's chart).
    let owned = crate::crds::CHART_OWNERS.len();
    ensure!(
        crds.len() == owned,
        "{} CRDs rendered, not {owned}",
        crds.len()
    );
    for crd in crds {
        ensure!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"].is_null(),
            "{} is still kept",
            name(crd)
        );
    }
    Ok(())
}

fn no_crds(rendered: &Rendered) -> Result<()> {
    let crds = crds(rendered);
    ensure!(crds.is_empty(), "{} CRDs rendered", crds.len());
    Ok(())
}

fn host_network(rendered: &Rendered) -> Result<()> {
    for deployment in rendered.deployments()? {
        let spec = &deployment["spec"]["template"]["spec"];
        let webhook = container_port(deployment, "webhook");
        let args = args(deployment);
        ensure!(
            spec["hostNetwork"] == true
                && spec["dnsPolicy"] == "ClusterFirstWithHostNet"
                && container_port(deployment, "metrics") == Some(10261)
                && args.contains(&"--metrics-addr=0.0.0.0:10261")
                && (webhook.is_none()
                    || (webhook == Some(10260) && args.contains(&"--webhook-addr=0.0.0.0:10260"))),
            "{}: hostNetwork {}, dnsPolicy {}, webhook port {webhook:?}, metrics port {:?}, args {args:?}",
            name(deployment),
            spec["hostNetwork"],
            spec["dnsPolicy"],
            container_port(deployment, "metrics")
        );
    }
    let mut webhook_services = 0;
    for service in rendered.of_kind("Service") {
        let port = &service["spec"]["ports"][0];
        let deployment = rendered
            .of_kind("Deployment")
            .find(|deployment| component(deployment) == component(service))
            .with_context(|| format!("{}: no Deployment of its component", name(service)))?;
        let target = match &port["targetPort"] {
            Value::String(named) => container_port(deployment, named),
            number => number.as_i64(),
        };
        let expected = if port["name"] == "webhook" {
            webhook_services += 1;
            10260
        } else {
            10261
        };
        ensure!(
            target == Some(expected),
            "{}: targetPort reaches {target:?}, not {expected}",
            name(service)
        );
    }
    ensure!(
        webhook_services == 4,
        "{webhook_services} webhook Services, not 4"
    );
    Ok(())
}

fn no_aggregated_roles(rendered: &Rendered) -> Result<()> {
    for role in ["view", "edit", "admin"] {
        let roles = aggregated_to(rendered, role);
        ensure!(
            roles.is_empty(),
            "{} ClusterRoles aggregate to {role}",
            roles.len()
        );
    }
    Ok(())
}

/// The user bound to the default `view` ClusterRole (and the one bound to `edit`) in the check's
/// namespace.
const VIEWER: &str = "evictkit-chart-check-viewer";
const EDITOR: &str = "evictkit-chart-check-editor";

/// The rendered aggregated ClusterRoles applied for real: kube-controller-manager's
/// clusterrole-aggregation controller copies their rules into view, edit and admin, so a user
/// bound to `view` may list EvictionRequests but not create them, and one bound to `edit` may.
fn roles_aggregate(cluster: &Cluster, rendered: &Rendered) -> Result<()> {
    let mut manifest = String::new();
    for role in ["view", "edit", "admin"] {
        for object in aggregated_to(rendered, role) {
            manifest.push_str("---\n");
            manifest.push_str(&serde_json::to_string(object)?);
            manifest.push('\n');
        }
    }
    for (user, role) in [(VIEWER, "view"), (EDITOR, "edit")] {
        manifest.push_str(&format!(
            "---\n{{\"apiVersion\": \"rbac.authorization.k8s.io/v1\", \"kind\": \"RoleBinding\", \
             \"metadata\": {{\"name\": \"{user}\", \"namespace\": \"{NAMESPACE}\"}}, \
             \"roleRef\": {{\"apiGroup\": \"rbac.authorization.k8s.io\", \"kind\": \"ClusterRole\", \
             \"name\": \"{role}\"}}, \"subjects\": [{{\"apiGroup\": \"rbac.authorization.k8s.io\", \
             \"kind\": \"User\", \"name\": \"{user}\"}}]}}\n"
        ));
    }
    cluster.kubectl_stdin(&["apply", "-f", "-"], &manifest)?;
    let outcome = wait_for_grants(cluster);
    cluster.kubectl_stdin(&["delete", "--ignore-not-found", "-f", "-"], &manifest)?;
    let answers = outcome?;
    eprintln!("    chart evictkit: aggregated ClusterRoles aggregate: {answers}");
    Ok(())
}

/// `kubectl auth can-i` as each user until every answer is the expected one, for 30 s.
fn wait_for_grants(cluster: &Cluster) -> Result<String> {
    let expected = [
        (VIEWER, "list", "yes"),
        (VIEWER, "create", "no"),
        (EDITOR, "create", "yes"),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut answers = Vec::new();
        for resource in CRD_RESOURCES {
            for (user, verb, _) in expected {
                let answer = can_i(cluster, user, verb, &format!("{resource}.evictkit.io"))?;
                answers.push(format!("{user} {verb} {resource}: {answer}"));
            }
        }
        let all_expected = answers.iter().enumerate().all(|(index, answer)| {
            answer.ends_with(&format!(": {}", expected[index % expected.len()].2))
        });
        if all_expected {
            return Ok(answers.join("; "));
        }
        if Instant::now() > deadline {
            bail!("after 30 s: {}", answers.join("; "));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `yes` or `no`: a SubjectAccessReview, what `kubectl auth can-i --as` asks (whose `no` is
/// an exit status, not told apart from a failure here).
fn can_i(cluster: &Cluster, user: &str, verb: &str, resource: &str) -> Result<String> {
    let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
    let review = serde_json::json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "resourceAttributes": {
                "namespace": NAMESPACE, "verb": verb, "group": group, "resource": resource,
            },
        },
    });
    let allowed = cluster.kubectl_stdin(
        &["create", "-f", "-", "-o", "jsonpath={.status.allowed}"],
        &review.to_string(),
    )?;
    Ok(if allowed.trim() == "true" {
        "yes"
    } else {
        "no"
    }
    .to_owned())
}
