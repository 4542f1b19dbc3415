//! `kubectl evictkit`: kubectl runs `kubectl-evictkit` from PATH for `kubectl evictkit ...`.
//! One binary over the components' own subcommands: pdb-policy-webhook's `explain` (a pod,
//! or every pod of a node), evictionrequest-controller's `describe`, and a listing of the
//! EvictionRequests of both APIs. Exit codes tell a refused eviction from an error, so a
//! script can gate a drain on `kubectl evictkit drain-preview NODE`; `drain` is kubectl drain
//! through EvictionRequests.

mod answer;
mod completion;
mod connection;
mod drain;
mod requests;
mod verbosity;

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result, bail};
use clap::{CommandFactory as _, Parser, Subcommand, ValueEnum};
use evictkit_commands::explain::{self, EVICTION_WEBHOOK_NAME, ExplainArgs};
use evictkit_commands::requests::{self as controller, DescribeArgs};
use evictkit_runtime::clients::eviction_request::apis::ApiMode;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};
use serde::Serialize;

use crate::answer::Answer;
use crate::connection::{Connection, ConnectionArgs};
use crate::requests::Scope;

const EXIT_CODES: &str = "\
Exit codes:
  0  done; for explain and drain-preview: every eviction would be allowed; for drain: every
     pod is gone; for describe also when the pod has no request
  1  error: the cluster cannot be reached, or the pod, node or namespace does not exist
  2  bad usage (unknown flag, missing argument)
  3  explain and drain-preview: at least one eviction would be refused; drain: pods are left
     on the node (refused by drain's rules, or still there at --timeout or Ctrl-C); drain
     wait and drain status: the detached drain ended with pods left, or wait's --timeout
     passed (the drain goes on)";

/// The top-level help's examples: one per command.
const EXAMPLES: &str = "\
Examples:
  kubectl evictkit explain shop/web-0
  kubectl evictkit drain-preview node-1
  kubectl evictkit drain node-1 node-2 --ignore-daemonsets --timeout 10m
  kubectl evictkit drain -l pool=old --dry-run -o json
  kubectl evictkit drain node-1 --detach --ignore-daemonsets --timeout 1h
  kubectl evictkit drain wait node-1
  kubectl evictkit uncordon node-1
  kubectl evictkit requests -A
  kubectl evictkit describe web-0 -n shop
  source <(kubectl evictkit completion bash)   # completes kubectl-evictkit typed as such";

/// Why pods will or will not evict, and the EvictionRequests in flight (evictkit).
#[derive(Debug, Parser)]
#[command(
    name = "kubectl evictkit",
    bin_name = "kubectl evictkit",
    version,
    after_help = format!("{EXAMPLES}\n\n{EXIT_CODES}")
)]
struct Cli {
    #[command(flatten)]
    connection: ConnectionArgs,
    /// The namespace of POD and of `requests` (default: the context's namespace).
    #[arg(short = 'n', long, global = true, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// Output format: a table (describe: text) for people, or the objects or report as JSON or YAML.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
    /// Log to stderr, as kubectl's -v does (-v=6, -v 6, --v=6): 4 and above, what the drain
    /// decides (each request asked, refused or withdrawn, each eviction, each pod's state and
    /// blocker as they change); 6 and above, each API call (verb, URL, status, milliseconds).
    /// No level prints headers or bodies (kubectl's 7 to 9): 8 prints what 6 does.
    #[arg(
        short = 'v',
        long = "v",
        global = true,
        value_name = "LEVEL",
        default_value_t = 0
    )]
    verbosity: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
    Yaml,
}

/// The formats that print data rather than text for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Structured {
    Json,
    Yaml,
}

impl Format {
    fn structured(self) -> Option<Structured> {
        match self {
            Self::Table => None,
            Self::Json => Some(Structured::Json),
            Self::Yaml => Some(Structured::Yaml),
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// What an eviction of POD would get from the apiserver and evictkit's stricter rules, why,
    /// and what would change it. -o json|yaml: the explanation report.
    #[command(after_help = EXIT_CODES)]
    Explain {
        /// The pod, as NAMESPACE/POD or POD (in -n's namespace).
        #[arg(value_name = "[NAMESPACE/]POD")]
        pod: String,
        #[command(flatten)]
        webhook: EvictionWebhook,
    },
    /// explain for every pod on NODE, as `kubectl drain NODE` would evict them (DaemonSet and
    /// mirror pods included). -o json|yaml: the explanation reports.
    #[command(after_help = EXIT_CODES)]
    DrainPreview {
        #[arg(value_name = "NODE")]
        node: String,
        #[command(flatten)]
        webhook: EvictionWebhook,
    },
    /// The EvictionRequests of the namespace (or of all with -A), evictkit.io's and, when the
    /// cluster serves it, lifecycle.k8s.io's. -o json|yaml: the objects, as a List.
    Requests {
        /// List the requests of every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// kubectl drain, cooperative: cordons the nodes, asks each pod to go through an
    /// EvictionRequest (lifecycle.k8s.io where served, else evictkit.io's CRD) so its
    /// interceptors or responders act first, and shows each pod's progress; at --timeout or
    /// Ctrl-C it withdraws its requests and says what it left. --detach leaves it to the
    /// cluster (a NodeDrain the evictionrequest-controller runs); `drain status NODE` and
    /// `drain wait NODE` follow it.
    /// -o json: a JSON object per line as the drain goes, then a summary (schema in
    /// docs/kubectl-evictkit.md).
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", drain::DIFFERENCES))]
    Drain(drain::DrainArgs),
    /// Takes a drain back: withdraws the drain's EvictionRequests of the pods still on the
    /// nodes, then makes the nodes schedulable again.
    Uncordon(drain::UncordonArgs),
    /// A pod's EvictionRequest in words: requesters, interceptors and their timeline,
    /// conditions. -o json|yaml: the pod's EvictionRequests (and lifecycle.k8s.io Evictions).
    Describe {
        /// The pod, as NAMESPACE/POD or POD (in -n's namespace); it may be gone already.
        #[arg(value_name = "[NAMESPACE/]POD")]
        pod: String,
        /// The API to read: lifecycle.k8s.io when discovery shows it (auto), or as chosen.
        #[arg(long, value_enum, default_value_t = ApiMode::Auto)]
        api: ApiMode,
    },
    /// A completion script for the shell, for typing kubectl-evictkit itself (`kubectl
    /// evictkit` completes through kubectl_complete-evictkit, in the release archive).
    Completion(completion::CompletionArgs),
}

#[derive(Debug, clap::Args)]
struct EvictionWebhook {
    /// The name of pdb-policy-webhook's eviction webhook (the chart's default): the apiserver
    /// quotes it in the message of a denial by a stricter rule.
    #[arg(long, value_name = "NAME", default_value = EVICTION_WEBHOOK_NAME)]
    eviction_webhook_name: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    if let Some(code) = completion::answer_kubectl(Cli::command) {
        return code;
    }
    let cli = Cli::parse();
    verbosity::init(cli.verbosity);
    let result = match &cli.command {
        // Completion needs no cluster: answered before connecting.
        Command::Completion(args) => {
            completion::print_script(args, Cli::command()).map(|()| Answer::Done)
        }
        _ => run(cli).await,
    };
    if let Err(error) = &result {
        eprintln!("error: {}", error_message(error));
    }
    ExitCode::from(Answer::exit_code(&result))
}

async fn run(cli: Cli) -> Result<Answer> {
    let Connection {
        client,
        namespace: context_namespace,
    } = connection::connect(&cli.connection).await?;
    let namespace = cli.namespace.unwrap_or(context_namespace);
    match cli.command {
        Command::Explain { pod, webhook } => {
            let (namespace, name) = qualify(&pod, &namespace)?;
            let args = explain_args(Some(format!("{namespace}/{name}")), None, webhook);
            explain(&client, &args, cli.output).await
        }
        Command::DrainPreview { node, webhook } => {
            // Listing by spec.nodeName finds no pod on a node that does not exist: say so.
            Api::<Node>::all(client.clone())
                .get(&node)
                .await
                .with_context(|| format!("reading node {node}"))?;
            let args = explain_args(None, Some(node), webhook);
            explain(&client, &args, cli.output).await
        }
        Command::Requests { all_namespaces } => {
            let scope = if all_namespaces {
                Scope::All
            } else {
                Scope::Namespace(namespace)
            };
            let listing = requests::list(&client, &scope).await?;
            let rows = listing.rows();
            match cli.output.structured() {
                // As kubectl get: the empty answer on stderr, so stdout stays a table or nothing.
                None if rows.is_empty() => eprintln!("No EvictionRequests found in {scope}."),
                None => print(&requests::table(&rows, Timestamp::now()))?,
                Some(format) => print_as(format, &listing.to_list()?)?,
            }
            Ok(Answer::Done)
        }
        Command::Drain(args) => {
            let output = match cli.output {
                Format::Table => drain::Output::Text,
                Format::Json => drain::Output::Json,
                Format::Yaml => bail!(
                    "drain prints text, or -o json: one JSON object per line as it goes (no YAML)"
                ),
            };
            drain::run(&client, args, output, cli.verbosity).await
        }
        Command::Uncordon(args) => drain::uncordon(&client, args).await,
        Command::Completion(_) => unreachable!("main prints completion scripts before connecting"),
        Command::Describe { pod, api } => {
            let (namespace, name) = qualify(&pod, &namespace)?;
            match cli.output.structured() {
                None => {
                    let args = DescribeArgs {
                        pod: (namespace, name),
                        api,
                    };
                    controller::describe(&client, &args).await?;
                }
                Some(format) => {
                    let listing = describe_objects(&client, &namespace, &name, api).await?;
                    print_as(format, &listing.to_list()?)?;
                }
            }
            Ok(Answer::Done)
        }
    }
}

fn explain_args(
    pod: Option<String>,
    node: Option<String>,
    webhook: EvictionWebhook,
) -> ExplainArgs {
    ExplainArgs {
        pod,
        node,
        // The format is ours (-o); explain's own flag is not read by `explain::explain`.
        output: explain::Output::Table,
        eviction_webhook_name: webhook.eviction_webhook_name,
    }
}

async fn explain(client: &Client, args: &ExplainArgs, format: Format) -> Result<Answer> {
    let explanations = explain::explain(client.clone(), args).await?;
    match format.structured() {
        None => print(&explain::table(&explanations))?,
        Some(format) => print_as(format, &explanations)?,
    }
    Ok(Answer::of(&explanations))
}

/// The objects `describe` reads, from the API it reads them from (auto: both).
async fn describe_objects(
    client: &Client,
    namespace: &str,
    name: &str,
    api: ApiMode,
) -> Result<requests::Listing> {
    if api == ApiMode::Crd {
        return Ok(requests::Listing {
            crd: controller::find(client, namespace, name)
                .await?
                .into_iter()
                .collect(),
            ..requests::Listing::default()
        });
    }
    let scope = Scope::Namespace(namespace.to_owned());
    let mut listing = requests::list(client, &scope).await?.of_pod(name);
    if api == ApiMode::Lifecycle {
        listing.crd.clear();
    }
    Ok(listing)
}

/// The error's chain, ending at the apiserver's own message where there is one: kube's
/// display of an API error repeats the whole Status object.
fn error_message(error: &anyhow::Error) -> String {
    let mut parts = Vec::new();
    for cause in error.chain() {
        if let Some(kube::Error::Api(status)) = cause.downcast_ref::<kube::Error>() {
            parts.push(status.message.clone());
            break;
        }
        parts.push(cause.to_string());
    }
    parts.join(": ")
}

/// `NAMESPACE/POD` as it is, or `POD` in `namespace`.
fn qualify(pod: &str, namespace: &str) -> Result<(String, String)> {
    match pod.split_once('/') {
        None if !pod.is_empty() => Ok((namespace.to_owned(), pod.to_owned())),
        Some((namespace, name))
            if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
        {
            Ok((namespace.to_owned(), name.to_owned()))
        }
        _ => bail!("{pod:?} is not POD or NAMESPACE/POD, e.g. web-0 or shop/web-0"),
    }
}

fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn print_as(format: Structured, value: &impl Serialize) -> Result<()> {
    let text = match format {
        Structured::Json => format!("{}\n", serde_json::to_string_pretty(value)?),
        Structured::Yaml => serde_saphyr::to_string(value)?,
    };
    print(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn api_errors_end_with_the_apiservers_message() {
        let status: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "code": 404, "reason": "NotFound", "message": "pods \"ghost\" not found",
        }))
        .unwrap();
        let error = anyhow::Error::new(kube::Error::Api(Box::new(status)))
            .context("reading pod shop/ghost");
        assert_eq!(
            error_message(&error),
            "reading pod shop/ghost: pods \"ghost\" not found"
        );
        let error = anyhow::anyhow!("no route").context("listing EvictionRequests");
        assert_eq!(error_message(&error), "listing EvictionRequests: no route");
    }

    #[test]
    fn verbosity_is_taken_as_kubectl_takes_it() {
        let level = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once(&"kubectl-evictkit").chain(args))
                .map(|cli| cli.verbosity)
        };
        // (arguments, level)
        let cases: [(&[&str], u8); 8] = [
            (&["requests"], 0),
            (&["requests", "-v=6"], 6),
            (&["requests", "-v", "6"], 6),
            (&["requests", "-v6"], 6),
            (&["requests", "--v=6"], 6),
            (&["requests", "--v", "4"], 4),
            (&["-v=8", "drain", "n"], 8),
            (&["drain", "n", "-v", "0"], 0),
        ];
        for (args, expected) in cases {
            assert_eq!(level(args).expect("valid"), expected, "{args:?}");
        }
        for args in [&["requests", "-v=-1"][..], &["requests", "-v", "loud"]] {
            assert_eq!(level(args).expect_err("invalid").exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn pods_are_named_with_or_without_their_namespace() {
        let ok = |pod: &str| qualify(pod, "default").unwrap();
        assert_eq!(ok("web-0"), ("default".into(), "web-0".into()));
        assert_eq!(ok("shop/web-0"), ("shop".into(), "web-0".into()));
        for bad in ["", "/web-0", "shop/", "a/b/c"] {
            assert!(qualify(bad, "default").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn usage_errors_exit_with_clap_code_2_and_help_lists_the_exit_codes() {
        let error = Cli::try_parse_from(["kubectl-evictkit", "explain"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        let error =
            Cli::try_parse_from(["kubectl-evictkit", "requests", "-o", "wide"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        // drain needs a node, and takes kubectl's duration syntax.
        let error = Cli::try_parse_from(["kubectl-evictkit", "drain"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        let error = Cli::try_parse_from(["kubectl-evictkit", "drain", "n", "--timeout", "ten"])
            .unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(
            Cli::try_parse_from(["kubectl-evictkit", "drain", "n", "--timeout", "1m30s"]).is_ok()
        );
        let help = Cli::try_parse_from(["kubectl-evictkit", "--help"])
            .unwrap_err()
            .to_string();
        assert!(
            help.contains("3  explain and drain-preview: at least one eviction would be refused"),
            "{help}"
        );
        // Every command is listed with an example.
        use clap::CommandFactory as _;
        for command in Cli::command().get_subcommands() {
            let name = command.get_name();
            if name != "help" {
                assert!(
                    help.contains(&format!("  {name} "))
                        && help.contains(&format!("kubectl evictkit {name} ")),
                    "{name}: {help}"
                );
            }
        }
        let cli = Cli::try_parse_from([
            "kubectl-evictkit",
            "describe",
            "web-0",
            "-n",
            "shop",
            "--context",
            "dev",
            "-o",
            "yaml",
        ])
        .unwrap();
        assert_eq!(
            (
                cli.namespace.as_deref(),
                cli.connection.context.as_deref(),
                cli.output
            ),
            (Some("shop"), Some("dev"), Format::Yaml)
        );
    }

    #[test]
    fn help_says_where_the_grace_period_applies() {
        let help = Cli::try_parse_from(["kubectl-evictkit", "drain", "--help"])
            .expect_err("help")
            .to_string();
        for says in [
            "each Eviction of --eviction-api-fallback",
            "each deletion of --escalate, --detach's included",
            "the request carries no grace period",
            "--grace-period, partly",
        ] {
            assert!(help.contains(says), "{says}: {help}");
        }
        assert!(!help.contains("no --grace-period"), "{help}");
    }
}
