//! evictionrequest-controller's subcommands for people: take part as a requester by hand, and
//! read a request in words (also kubectl-evictkit's `describe`). On evictkit.io's CRD here, on
//! lifecycle.k8s.io (upstream's API) in [`upstream`].

mod error;
mod reads;
mod upstream;

use evictkit_api::eviction_request::EvictionRequest;
use evictkit_runtime::clients::eviction_request::TargetPod;
use evictkit_runtime::clients::eviction_request::apis::{ApiMode, served};
use evictkit_runtime::clients::eviction_request::crd::{request_eviction, withdraw_target};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};

pub use error::RequestCommandError;
use reads::{list_requests, read_pod};

use crate::ApiError;

#[derive(Debug, clap::Args)]
pub struct RequestArgs {
    /// The pod, as NAMESPACE/POD.
    #[arg(value_name = "NAMESPACE/POD", value_parser = parse_pod)]
    pub pod: (String, String),
    /// Requester name, a DNS subdomain such as maintenance.example.com; also the field manager
    /// of the write, so each requester owns only its own entry. With the lifecycle.k8s.io API a
    /// domain-prefixed key such as example.com/maintenance.
    #[arg(long, value_name = "NAME")]
    pub requester: String,
    /// The API to use: lifecycle.k8s.io when discovery shows it (auto), or as chosen.
    #[arg(long, value_enum, default_value_t = ApiMode::Auto)]
    pub api: ApiMode,
}

#[derive(Debug, clap::Args)]
pub struct DescribeArgs {
    /// The pod, as NAMESPACE/POD (it may be gone already).
    #[arg(value_name = "NAMESPACE/POD", value_parser = parse_pod)]
    pub pod: (String, String),
    /// The API to read: both (auto: lifecycle.k8s.io where served, evictkit.io's CRD where
    /// installed), or the one chosen.
    #[arg(long, value_enum, default_value_t = ApiMode::Auto)]
    pub api: ApiMode,
}

/// The API `mode` names, discovered for `auto`.
async fn resolve(mode: ApiMode, client: &Client) -> Result<ApiMode, RequestCommandError> {
    mode.resolve(client)
        .await
        .map_err(RequestCommandError::Discovery)
}

fn parse_pod(value: &str) -> Result<(String, String), String> {
    match value.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => {
            Ok((namespace.to_owned(), name.to_owned()))
        }
        _ => Err(format!("expected NAMESPACE/POD, got {value:?}")),
    }
}

/// Asks for the eviction of the pod as `args.requester` (creates or joins its EvictionRequest).
pub async fn request(client: &Client, args: &RequestArgs) -> Result<(), RequestCommandError> {
    let (namespace, name) = &args.pod;
    if resolve(args.api, client).await? == ApiMode::Lifecycle {
        return upstream::request(client, namespace, name, &args.requester).await;
    }
    let pod = read_pod(client, namespace, name).await?;
    let request = request_eviction(client, &pod, &args.requester).await?;
    println!(
        "EvictionRequest {namespace}/{} requests the eviction of pod {namespace}/{name} as {}.",
        request.metadata.name.unwrap_or_default(),
        args.requester
    );
    Ok(())
}

/// Withdraws `args.requester` from the pod's EvictionRequest; with no requester left it is
/// canceled.
pub async fn withdraw(client: &Client, args: &RequestArgs) -> Result<(), RequestCommandError> {
    let (namespace, name) = &args.pod;
    if resolve(args.api, client).await? == ApiMode::Lifecycle {
        return upstream::withdraw_request(client, namespace, name, &args.requester).await;
    }
    let Some(request) = find(client, namespace, name).await? else {
        println!("Pod {namespace}/{name} has no EvictionRequest.");
        return Ok(());
    };
    let target = TargetPod {
        namespace: namespace.clone(),
        name: name.clone(),
        uid: request.metadata.name.clone().unwrap_or_default(),
    };
    match withdraw_target(client, &target, &args.requester).await? {
        Some(request) if request.spec.requesters.is_empty() => println!(
            "{} withdrew; no requester is left, so the request will be canceled.",
            args.requester
        ),
        Some(_) => println!("{} withdrew; other requesters remain.", args.requester),
        None => println!("Pod {namespace}/{name} has no EvictionRequest."),
    }
    Ok(())
}

/// Prints a pod's request in words (also the text of `kubectl evictkit describe`). `auto` reads
/// both APIs a cluster may hold requests in: lifecycle.k8s.io where it is served, and
/// evictkit.io's CRD where it is installed (a v1.37 cluster may have both).
pub async fn describe(client: &Client, args: &DescribeArgs) -> Result<(), RequestCommandError> {
    let (namespace, name) = &args.pod;
    let upstream = match args.api {
        ApiMode::Lifecycle => true,
        ApiMode::Crd => false,
        ApiMode::Auto => served(client)
            .await
            .map_err(RequestCommandError::Discovery)?,
    };
    let mut found = upstream && upstream::describe_pod(client, namespace, name).await?;
    if args.api != ApiMode::Lifecycle {
        let request = match find(client, namespace, name).await {
            Ok(request) => request,
            // auto: a cluster without the CRD simply has no such requests.
            Err(error) if args.api == ApiMode::Auto && error.not_found() => None,
            Err(error) => return Err(error.into()),
        };
        if let Some(request) = request {
            for line in evictkit_core::eviction_request::crd::describe(&request, Timestamp::now()) {
                println!("{line}");
            }
            found = true;
        }
    }
    if !found {
        println!("Pod {namespace}/{name} has no EvictionRequest.");
    }
    Ok(())
}

/// The request of the pod named `name`: the one named after the current pod's UID, or else
/// (the pod is gone) the newest one that targets a pod of that name. A 404 says that
/// evictkit.io's CRD is not installed (a pod or request that does not exist is `None`).
pub async fn find(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<EvictionRequest>, ApiError> {
    let requests = Api::<EvictionRequest>::namespaced(client.clone(), namespace);
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(ApiError::of(
            "cannot read",
            format!("pod {namespace}/{name}"),
        ))?;
    if let Some(uid) = pod.and_then(|p| p.metadata.uid) {
        return requests.get_opt(&uid).await.map_err(ApiError::of(
            "cannot read",
            format!("EvictionRequest {namespace}/{uid}"),
        ));
    }
    Ok(list_requests::<EvictionRequest>(client, namespace)
        .await?
        .into_iter()
        .filter(|r| r.spec.target.pod.as_ref().is_some_and(|p| p.name == name))
        .max_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
        }))
}
