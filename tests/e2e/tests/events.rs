//! The Event pipeline every component records through (`evictkit_runtime::events`), against a
//! real apiserver: client-go's correlator decides, the recorder creates Events and counts
//! repeats in their series (issue 33).

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams};

use evictkit_core::event_correlation::COMBINED_PREFIX;
use evictkit_runtime::events::EventRecorder;
use evictkit_testenv::TestEnv;

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

#[tokio::test]
async fn repeats_count_in_a_series_similar_events_are_combined_and_spam_is_dropped() -> Result<()> {
    let env = TestEnv::new("events").await?;
    let subject = env
        .create(&ConfigMap {
            metadata: ObjectMeta {
                name: Some("subject".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        })
        .await?;
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
