use super::*;

fn object(kind: &str, name: &str, namespace: &str) -> ObjectReference {
    // client-go's makeObjectReference.
    ObjectReference {
        kind: Some(kind.into()),
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        uid: Some("C934D34AFB20242".into()),
        api_version: Some("version".into()),
        field_path: Some("spec.containers{mycontainer}".into()),
        ..ObjectReference::default()
    }
}

#[derive(Clone)]
struct Ev {
    regarding: ObjectReference,
    reason: String,
    note: String,
}

impl Ev {
    fn new(reason: &str, note: &str, regarding: ObjectReference) -> Self {
        Self {
            regarding,
            reason: reason.into(),
            note: note.into(),
        }
    }

    fn occurrence(&self) -> Occurrence<'_> {
        Occurrence {
            regarding: &self.regarding,
            warning: false,
            reason: &self.reason,
            action: "",
            note: &self.note,
        }
    }
}

fn repeated(n: usize, event: &Ev) -> Vec<Ev> {
    vec![event.clone(); n]
}

// client-go's makeUniqueEvents.
fn unique(n: usize) -> Vec<Ev> {
    (0..n)
        .map(|i| {
            Ev::new(
                &format!("reason-{i}"),
                &format!("message-{i}"),
                object("Pod", &format!("pod-{i}"), &format!("ns-{i}")),
            )
        })
        .collect()
}

// client-go's makeSimilarEvents: the same event, each with its own note.
fn similar(n: usize, event: &Ev) -> Vec<Ev> {
    (0..n)
        .map(|i| Ev {
            note: format!("{}-{i}-{}", event.note, event.note),
            ..event.clone()
        })
        .collect()
}

#[derive(Debug, PartialEq)]
enum Expect {
    Skip,
    Create(String),
    Repeat(i32),
}

fn outcome(correlation: Correlation) -> Expect {
    match correlation {
        Correlation::Skip => Expect::Skip,
        Correlation::Create { note, .. } => Expect::Create(note),
        Correlation::Repeat { count, .. } => Expect::Repeat(count),
    }
}

fn start() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap()
}

/// client-go's TestEventCorrelator. Its interval clock ticks at each reading, three per Event
/// (the test's, the aggregator's, the spam filter's), so its Events are three intervals apart.
#[test]
fn client_go_event_correlator() {
    let first = Ev::new("first", "i am first", object("Pod", "my-pod", "my-ns"));
    let duplicate = Ev::new("duplicate", "me again", object("Pod", "my-pod", "my-ns"));
    let unique_event = Ev::new("unique", "snowflake", object("Pod", "my-pod", "my-ns"));
    let mut similar_event = Ev::new(
        "similar",
        "similar message",
        object("Pod", "my-pod", "my-ns"),
    );
    similar_event.regarding.field_path = Some("spec.containers{container1}".into());
    let mut other_container = similar_event.clone();
    other_container.regarding.field_path = Some("spec.containers{container2}".into());
    let combined = format!("{COMBINED_PREFIX}similar message");

    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<Ev>, &Ev, i64, Expect)> = vec![
        ("create-a-single-event", vec![], &first, 5, Expect::Create("i am first".into())),
        ("the-same-event-should-just-count", repeated(1, &duplicate), &duplicate, 5, Expect::Repeat(2)),
        ("the-same-event-should-just-count-even-if-more-than-aggregate",
            repeated(10, &duplicate), &duplicate, 30, Expect::Repeat(11)),
        ("the-same-event-is-spam-if-happens-too-frequently",
            repeated(26, &duplicate), &duplicate, 1, Expect::Skip),
        ("create-many-unique-events", unique(30), &unique_event, 5, Expect::Create("snowflake".into())),
        ("similar-events-should-aggregate-event",
            similar(9, &similar_event), &similar_event, 5, Expect::Create(combined.clone())),
        ("similar-events-many-times-should-count-the-aggregate",
            similar(10, &similar_event), &similar_event, 5, Expect::Repeat(2)),
        ("events-from-different-containers-do-not-aggregate",
            repeated(1, &other_container), &similar_event, 5, Expect::Create("similar message".into())),
        ("similar-events-whose-interval-is-greater-than-aggregate-interval-do-not-aggregate",
            similar(9, &similar_event), &similar_event, 600, Expect::Create("similar message".into())),
    ];
    for (name, previous, event, interval, expected) in cases {
        let step = SignedDuration::from_secs(3 * interval);
        let mut correlator = Correlator::new(Limits::CLIENT_GO);
        let mut now = start();
        for previous in &previous {
            correlator.correlate(previous.occurrence(), now);
            now += step;
        }
        let got = outcome(correlator.correlate(event.occurrence(), now));
        assert_eq!(got, expected, "{name}");
    }
}

/// client-go's TestEventSpamFilter, the case with the default spam key (its other cases replace
/// the key function, which evictkit does not offer): with a burst of 1, a second Event about
/// the same object is dropped even with another reason.
#[test]
fn client_go_event_spam_filter() {
    let limits = Limits {
        spam_burst: 1,
        ..Limits::CLIENT_GO
    };
    let original = Ev::new("original", "i am first", object("Pod", "my-pod", "my-ns"));
    let different_reason = Ev::new("duplicate", "me again", object("Pod", "my-pod", "my-ns"));
    let mut correlator = Correlator::new(limits);
    let now = start();
    assert_eq!(
        outcome(correlator.correlate(original.occurrence(), now)),
        Expect::Create("i am first".into())
    );
    assert_eq!(
        outcome(correlator.correlate(
            different_reason.occurrence(),
            now + SignedDuration::from_secs(1)
        )),
        Expect::Skip
    );
}

/// client-go's TestEventf, its Events in turn through one correlator: a repeat of an Event
/// (same object, field path, type, reason and note) counts in the series of the first; a
/// pod of the same name with another UID, or another reason, is an Event of its own.
#[test]
fn client_go_eventf_series() {
    let container = |uid: &str, field_path: &str| ObjectReference {
        kind: Some("Pod".into()),
        name: Some("foo".into()),
        namespace: Some("baz".into()),
        uid: Some(uid.into()),
        api_version: Some("v1".into()),
        field_path: Some(field_path.into()),
        ..ObjectReference::default()
    };
    let test_ref = container("bar", "spec.containers[2]");
    let test_pod = ObjectReference {
        field_path: None,
        ..test_ref.clone()
    };
    let test_ref2 = container("differentUid", "spec.containers[3]");
    let started = "some verbose message: 1";
    #[rustfmt::skip]
    let steps: Vec<(&ObjectReference, &str, &str, Expect)> = vec![
        (&test_ref, "Started", started, Expect::Create(started.into())),
        (&test_pod, "Killed", "some other verbose message: 1",
            Expect::Create("some other verbose message: 1".into())),
        (&test_ref, "Started", started, Expect::Repeat(2)),
        (&test_ref2, "Started", started, Expect::Create(started.into())),
        (&test_ref, "Started", started, Expect::Repeat(3)),
        (&test_ref2, "Stopped", started, Expect::Create(started.into())),
        (&test_ref2, "Stopped", started, Expect::Repeat(2)),
    ];
    let mut correlator = Correlator::new(Limits::CLIENT_GO);
    let mut now = start();
    for (i, (regarding, reason, note, expected)) in steps.into_iter().enumerate() {
        let event = Ev::new(reason, note, regarding.clone());
        assert_eq!(
            outcome(correlator.correlate(event.occurrence(), now)),
            expected,
            "step {i}"
        );
        now += SignedDuration::from_secs(1);
    }
}

/// client-go's spam key (`getSpamKey`): the object with its UID, and the type. A Warning
/// still goes out once the object's Normal budget is spent, and so does an Event about a
/// successor of the same name (another UID).
#[test]
fn client_go_spam_key_is_the_object_and_the_type() {
    let mut correlator = Correlator::new(Limits::CLIENT_GO);
    let pod = object("Pod", "p", "ns");
    let now = start();
    for i in 0..25 {
        let event = Ev::new(&format!("r{i}"), "n", pod.clone());
        assert_ne!(
            correlator.correlate(event.occurrence(), now),
            Correlation::Skip,
            "{i}"
        );
    }
    let spam = Ev::new("late", "n", pod.clone());
    assert_eq!(
        correlator.correlate(spam.occurrence(), now),
        Correlation::Skip
    );
    let warning = Occurrence {
        warning: true,
        ..spam.occurrence()
    };
    assert_ne!(correlator.correlate(warning, now), Correlation::Skip);
    let successor = Ev::new(
        "late",
        "n",
        ObjectReference {
            uid: Some("another".into()),
            ..pod
        },
    );
    assert_ne!(
        correlator.correlate(successor.occurrence(), now),
        Correlation::Skip
    );
}

/// client-go's TestEventAggregatorByReasonFunc: only the note may differ within a group.
#[test]
fn client_go_aggregator_groups_by_object_type_and_reason() {
    let mut correlator = Correlator::new(Limits {
        aggregate_after: 2,
        ..Limits::CLIENT_GO
    });
    let now = start();
    let fun = Ev::new("end-of-world", "it was fun", object("Pod", "pod1", "other"));
    let awful = Ev::new(
        "end-of-world",
        "it was awful",
        object("Pod", "pod1", "other"),
    );
    let bug = Ev::new("nevermind", "it was a bug", object("Pod", "pod1", "other"));
    assert_eq!(
        outcome(correlator.correlate(fun.occurrence(), now)),
        Expect::Create("it was fun".into())
    );
    assert_eq!(
        outcome(correlator.correlate(bug.occurrence(), now)),
        Expect::Create("it was a bug".into())
    );
    assert_eq!(
        outcome(correlator.correlate(awful.occurrence(), now)),
        Expect::Create(format!("{COMBINED_PREFIX}it was awful"))
    );
}

/// The spam budget comes back at one Event per five minutes.
#[test]
fn the_spam_budget_refills_one_event_every_five_minutes() {
    let mut correlator = Correlator::new(Limits::CLIENT_GO);
    let pod = object("Pod", "p", "ns");
    let mut now = start();
    for i in 0..25 {
        let event = Ev::new(&format!("r{i}"), "n", pod.clone());
        assert_ne!(
            correlator.correlate(event.occurrence(), now),
            Correlation::Skip
        );
    }
    let late = Ev::new("late", "n", pod.clone());
    now += SignedDuration::from_secs(299);
    assert_eq!(
        correlator.correlate(late.occurrence(), now),
        Correlation::Skip
    );
    now += SignedDuration::from_secs(1);
    assert_ne!(
        correlator.correlate(late.occurrence(), now),
        Correlation::Skip
    );
}

/// A pod's first Event stays on the pod: Events about different pods are never folded
/// together, however many arrive.
#[test]
fn events_about_different_objects_are_never_folded() {
    let mut correlator = Correlator::new(Limits::CLIENT_GO);
    let now = start();
    for i in 0..100 {
        let event = Ev::new(
            "TaintManagerEviction",
            &format!("Marking for deletion Pod ns/pod-{i}"),
            object("Pod", &format!("pod-{i}"), "ns"),
        );
        match correlator.correlate(event.occurrence(), now) {
            Correlation::Create { name, note } => {
                assert!(name.starts_with(&format!("pod-{i}.")), "{name}");
                assert_eq!(note, event.note);
            }
            other => panic!("pod-{i}: {other:?}"),
        }
    }
}

#[test]
fn a_repeat_names_the_event_it_continues_and_names_are_unique() {
    let mut correlator = Correlator::new(Limits::CLIENT_GO);
    let now = start();
    let event = Ev::new("r", "n", object("Pod", "p", "ns"));
    let other = Ev::new("r2", "n", object("Pod", "p", "ns"));
    let Correlation::Create { name, .. } = correlator.correlate(event.occurrence(), now) else {
        panic!("first is created")
    };
    let Correlation::Create {
        name: other_name, ..
    } = correlator.correlate(other.occurrence(), now)
    else {
        panic!("another reason is created")
    };
    assert_ne!(name, other_name, "two Events in one nanosecond");
    assert_eq!(
        correlator.correlate(event.occurrence(), now + SignedDuration::from_secs(1)),
        Correlation::Repeat {
            name,
            note: "n".into(),
            count: 2
        }
    );
}

#[test]
fn caches_keep_recent_keys_and_stay_bounded() {
    let mut recent = Recent::new(3);
    let touch = |recent: &mut Recent<i32, i32>, key| {
        let value = recent.take(&key).unwrap();
        recent.put(key, value);
    };
    for i in 0..3 {
        recent.put(i, i);
    }
    touch(&mut recent, 0);
    recent.put(3, 3);
    touch(&mut recent, 0);
    for i in 4..7 {
        recent.put(i, i);
    }
    // 0 was used within the last three insertions; 1 was not, and two rotations dropped it.
    assert_eq!(recent.take(&0), Some(0));
    assert_eq!(recent.take(&1), None);
    for i in 0..1000 {
        recent.put(i, i);
        assert!(recent.len() <= 6);
    }
}

/// `cargo test -p evictkit-core --release event_correlation -- --ignored --nocapture`: the CPU
/// time per Event for N Events about N distinct pods stays flat from 1,000 to 30,000 pods
/// (a cache walked at each Event grows linearly).
#[test]
#[ignore = "micro-benchmark; prints CPU time per Event"]
fn cpu_per_event_is_flat_in_the_number_of_objects() {
    let mut per_event = Vec::new();
    for n in [1_000, 10_000, 30_000] {
        let pods: Vec<Ev> = (0..n)
            .map(|i| {
                Ev::new(
                    "TaintManagerEviction",
                    &format!("Marking for deletion Pod ns/pod-{i}"),
                    ObjectReference {
                        uid: Some(format!("uid-{i}")),
                        ..object("Pod", &format!("pod-{i}"), "ns")
                    },
                )
            })
            .collect();
        let mut correlator = Correlator::new(Limits::CLIENT_GO);
        let mut now = start();
        let cpu = thread_cpu();
        for pod in &pods {
            std::hint::black_box(correlator.correlate(pod.occurrence(), now));
            now += SignedDuration::from_millis(5);
        }
        let nanos = (thread_cpu() - cpu).as_nanos() / n as u128;
        println!("{n:>6} objects: {nanos} ns CPU per Event");
        per_event.push(nanos);
    }
    let (small, large) = (per_event[0].max(1), per_event[2]);
    assert!(large < 3 * small, "CPU per Event grew: {per_event:?} ns");
}

/// This thread's CPU time (Linux's schedstat, in nanoseconds).
pub(crate) fn thread_cpu() -> std::time::Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    let nanos = stat.split_whitespace().next().unwrap().parse().unwrap();
    std::time::Duration::from_nanos(nanos)
}
