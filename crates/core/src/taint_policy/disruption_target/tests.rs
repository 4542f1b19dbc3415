use super::*;
use crate::requester::Standing;

#[test]
fn mark_table() {
    use Mark::*;
    use Standing::*;
    #[rustfmt::skip]
    let cases: &[(&str, Standing, bool, Option<Mark>)] = &[
        ("not yet taken up: nothing said", Pending, false, None),
        ("accepted: said now", Accepted, false, Some(Set)),
        ("accepted and said: left", Accepted, true, None),
        ("refused before it was said: nothing to take back", Refused, false, None),
        ("refused after it was said: taken back", Refused, true, Some(TakeBack)),
        ("ended without the pod going: taken back", Ended, true, Some(TakeBack)),
        ("ended before it was said", Ended, false, None),
        ("a pending re-ask keeps what was said", Pending, true, None),
    ];
    for (name, standing, marked, want) in cases {
        assert_eq!(mark(*standing, *marked), *want, "{name}");
    }
}
