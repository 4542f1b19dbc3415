//! The Event pipeline every component records through (`evictkit_runtime::clients::events`), against a
//! real apiserver: client-go's correlator decides, the recorder creates Events and counts
//! repeats in their series; past their budget, Events with a fold target become one Event on
//! it.

use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{DeleteParams, ListParams};

use evictkit_core::event_correlation::COMBINED_PREFIX;
use evictkit_core::event_folding::{Fold, FoldLimits};
use evictkit_harness::TestEnv;
use evictkit_runtime::clients::events::{EventRecorder, EventType};

/// The Events about `name` with `reason`: (note, series count).
async fn events(env: &TestEnv, name: &str, reason: &str) -> Result<Vec<(String, i32)>> {
    let mut found: Vec<(String, i32)> = env
        .api::<Event>()
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| {
            (
                e.note.unwrap_or_default(),
                e.series.map_or(1, |series| series.count),
            )
        })
        .collect();
    found.sort();
    Ok(found)
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

#[tokio::test]
async fn repeats_count_in_a_series_similar_events_are_combined_and_spam_is_dropped() -> Result<()> {
    let env = TestEnv::new("events").await?;
    let subject = env.create(&config_map("subject")).await?;
    let recorder = EventRecorder::from_client(env.client.clone(), "evictkit-e2e");

    for _ in 0..3 {
        recorder.normal(&subject, "Repeated", "Test", "same").await;
    }
    let repeated = events(&env, "subject", "Repeated").await?;
    ensure!(repeated == [("same".into(), 3)], "{repeated:?}");

    // An Event the apiserver no longer has (its TTL passed) is created again, with its count.
    let name = env
        .api::<Event>()
        .list(&ListParams::default())
        .await?
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("Repeated"))
        .and_then(|e| e.metadata.name)
        .unwrap_or_default();
    env.api::<Event>()
        .delete(&name, &DeleteParams::default())
        .await?;
    recorder.normal(&subject, "Repeated", "Test", "same").await;
    let repeated = events(&env, "subject", "Repeated").await?;
    ensure!(repeated == [("same".into(), 4)], "{repeated:?}");

    // Ten notes: nine Events, then one combined; an eleventh note counts in the combined one.
    for i in 0..11 {
        recorder
            .normal(&subject, "Similar", "Test", &format!("note {i:02}"))
            .await;
    }
    let similar = events(&env, "subject", "Similar").await?;
    let mut expected: Vec<(String, i32)> = (0..9).map(|i| (format!("note {i:02}"), 1)).collect();
    expected.push((format!("{COMBINED_PREFIX}note 09"), 2));
    expected.sort();
    ensure!(similar == expected, "{similar:?}");

    // The spam budget is per object and type: 25 at once. The 15 Warnings all go out; the 4 + 11
    // Normal Events above left 10 of 30 more.
    for i in 0..15 {
        recorder
            .warning(&subject, &format!("Spam{i:02}"), "Test", "spam")
            .await;
    }
    for i in 0..30 {
        recorder
            .normal(&subject, &format!("Spam{i:02}"), "Test", "spam")
            .await;
    }
    let mut sent = 0;
    for i in 0..30 {
        sent += events(&env, "subject", &format!("Spam{i:02}")).await?.len();
    }
    ensure!(sent == 15 + 10, "{sent} spam Events sent");
    Ok(())
}

/// Past the budget of their kind (2 here), five subjects' Events become one Event on their
/// target naming the three folded, sent when its window (1 s) closes; the first two stay on
/// their own objects.
#[tokio::test]
async fn past_their_budget_events_fold_into_one_event_on_their_target() -> Result<()> {
    let env = TestEnv::new("events-fold").await?;
    let target = env.create(&config_map("target")).await?;
    let into = target.object_ref(&());
    let recorder = EventRecorder::with_limits(
        env.client.clone(),
        "evictkit-e2e",
        FoldLimits {
            burst: 2,
            refill_every: jiff::SignedDuration::from_hours(1),
            first_window: jiff::SignedDuration::from_secs(1),
            ..FoldLimits::DEFAULT
        },
    );
    for i in 0..5 {
        let subject = env.create(&config_map(&format!("subject-{i}"))).await?;
        let fold = Fold {
            into: &into,
            summary: "Removing",
        };
        let note = format!("Removing ConfigMap subject-{i}");
        recorder
            .publish_or_fold(&subject, EventType::Normal, "Folded", "Test", &note, fold)
            .await;
    }
    let ns = &env.namespace;
    let expected = vec![(
        format!(
            "Removing 3 ConfigMaps (one Event for all: more Events of this kind than their \
             budget): {ns}/subject-2, {ns}/subject-3, {ns}/subject-4"
        ),
        1,
    )];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let folded = events(&env, "target", "Folded").await?;
        if folded == expected {
            break;
        }
        if Instant::now() > deadline {
            bail!("on the target: {folded:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for i in 0..5 {
        let own = events(&env, &format!("subject-{i}"), "Folded").await?;
        let expected: Vec<(String, i32)> = match i {
            0 | 1 => vec![(format!("Removing ConfigMap subject-{i}"), 1)],
            _ => vec![],
        };
        ensure!(own == expected, "subject-{i}: {own:?}");
    }
    Ok(())
}
