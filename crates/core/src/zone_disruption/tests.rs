use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn zone_key_is_region_and_zone_as_upstream() {
    // (case, labels, key)
    let cases = vec![
        ("no labels: the one unnamed zone", labels(&[]), ""),
        (
            "topology labels",
            labels(&[
                (LABEL_TOPOLOGY_REGION, "region1"),
                (LABEL_TOPOLOGY_ZONE, "zone1"),
            ]),
            "region1/zone1",
        ),
        (
            "the same zone name in two regions is two zones",
            labels(&[
                (LABEL_TOPOLOGY_REGION, "region2"),
                (LABEL_TOPOLOGY_ZONE, "zone1"),
            ]),
            "region2/zone1",
        ),
        (
            "zone without region",
            labels(&[(LABEL_TOPOLOGY_ZONE, "zone1")]),
            "/zone1",
        ),
        (
            "the deprecated failure-domain labels win, as upstream reads them first",
            labels(&[
                (LABEL_FAILURE_DOMAIN_BETA_REGION, "old"),
                (LABEL_TOPOLOGY_REGION, "new"),
                (LABEL_FAILURE_DOMAIN_BETA_ZONE, "a"),
                (LABEL_TOPOLOGY_ZONE, "b"),
            ]),
            "old/a",
        ),
    ];
    for (case, labels, want) in cases {
        assert_eq!(zone_key(&labels), want, "{case}");
    }
}

#[test]
fn zone_state_is_compute_zone_state() {
    let flags = ZoneFlags::default();
    // (case, nodes, not ready, state)
    let cases = vec![
        ("all ready", 4, 0, ZoneState::Normal),
        ("none ready: full", 1, 1, ZoneState::FullDisruption),
        ("none of 2 ready: full", 2, 2, ZoneState::FullDisruption),
        (
            "2 of 3 not ready (0.67): normal, 2 is not more than 2",
            3,
            2,
            ZoneState::Normal,
        ),
        (
            "3 of 4 not ready (0.75 >= 0.55): partial",
            4,
            3,
            ZoneState::PartialDisruption,
        ),
        (
            "3 of 5 not ready (0.6): partial",
            5,
            3,
            ZoneState::PartialDisruption,
        ),
        (
            "3 of 6 not ready (0.5 < 0.55): normal",
            6,
            3,
            ZoneState::Normal,
        ),
        (
            "the threshold itself counts (11 of 20 = 0.55)",
            20,
            11,
            ZoneState::PartialDisruption,
        ),
        ("no nodes: normal", 0, 0, ZoneState::Normal),
    ];
    for (case, nodes, not_ready, want) in cases {
        assert_eq!(zone_state(nodes, not_ready, &flags), want, "{case}");
    }
}

/// Upstream's `TestMonitorNodeHealth` zone cases (states after the nodes' updates), with the
/// limit each state sets (`handleDisruption`, `setLimiterInZone`, `ReducedQPSFunc`).
#[test]
fn zones_follow_handle_disruption() {
    let flags = ZoneFlags {
        large_cluster_size_threshold: 5,
        ..ZoneFlags::default()
    };
    let normal = |nodes, not_ready| Zone {
        nodes,
        not_ready,
        state: ZoneState::Normal,
        limit: ZoneLimit::Unpaced,
    };
    let full = |nodes, limit| Zone {
        nodes,
        not_ready: nodes,
        state: ZoneState::FullDisruption,
        limit,
    };
    let partial = |nodes, not_ready, limit| Zone {
        nodes,
        not_ready,
        state: ZoneState::PartialDisruption,
        limit,
    };
    let rate = ZoneLimit::PerSecond(DEFAULT_NODE_EVICTION_RATE);
    let secondary = ZoneLimit::PerSecond(DEFAULT_SECONDARY_NODE_EVICTION_RATE);
    // (case, (zone, ready) per node, zones)
    type Case = (
        &'static str,
        Vec<(&'static str, bool)>,
        Vec<(&'static str, Zone)>,
    );
    let cases: Vec<Case> = vec![
        (
            "No Disruption: a node without zone labels",
            vec![("", true)],
            vec![("", normal(1, 0))],
        ),
        (
            "Network Disruption: only zone is down: nothing is removed",
            vec![("r1/z1", false), ("r1/z1", false)],
            vec![("r1/z1", full(2, ZoneLimit::Paused))],
        ),
        (
            "Network Disruption: both zones down: nothing is removed",
            vec![("r1/z1", false), ("r2/z2", false)],
            vec![
                ("r1/z1", full(1, ZoneLimit::Paused)),
                ("r2/z2", full(1, ZoneLimit::Paused)),
            ],
        ),
        (
            "Network Disruption: one zone down while another is healthy: the normal rate",
            vec![("r1/z1", false), ("r1/z2", true)],
            vec![("r1/z1", full(1, rate)), ("r1/z2", normal(1, 0))],
        ),
        (
            "Partial Disruption: 3 of 5 not ready in a small zone: removals stop",
            vec![
                ("r1/z1", false),
                ("r1/z1", false),
                ("r1/z1", false),
                ("r1/z1", true),
                ("r1/z1", true),
            ],
            vec![("r1/z1", partial(5, 3, ZoneLimit::Paused))],
        ),
        (
            "Partial Disruption: 4 of 6 not ready in a large zone: the secondary rate",
            vec![
                ("r1/z1", false),
                ("r1/z1", false),
                ("r1/z1", false),
                ("r1/z1", false),
                ("r1/z1", true),
                ("r1/z1", true),
            ],
            vec![("r1/z1", partial(6, 4, secondary))],
        ),
        (
            "a partially disrupted zone and a fully disrupted one: not all are full",
            vec![
                ("a", false),
                ("a", false),
                ("a", false),
                ("a", true),
                ("b", false),
            ],
            vec![
                ("a", partial(4, 3, ZoneLimit::Paused)),
                ("b", full(1, rate)),
            ],
        ),
        (
            "2 of 3 not ready: not more than 2, normal",
            vec![("a", false), ("a", false), ("a", true)],
            vec![("a", normal(3, 2))],
        ),
    ];
    for (case, nodes, want) in cases {
        let want: BTreeMap<String, Zone> =
            want.into_iter().map(|(z, s)| (z.to_owned(), s)).collect();
        assert_eq!(zones(nodes, &flags), want, "{case}");
    }
    let zero = ZoneFlags {
        node_eviction_rate: 0.0,
        ..flags
    };
    assert_eq!(
        zones([("a", false), ("b", true)], &zero)["a"].limit,
        ZoneLimit::Paused,
        "a rate of 0 pauses"
    );
}
