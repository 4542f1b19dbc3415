//! What the zone guard ([`crate::zone_guard`]) remembers between node events: each zone's
//! state and limit ([`evictkit_core::zone_disruption`]) and each paced zone's next free removal
//! slot, and from them whether a removal may go now.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use evictkit_core::zone_disruption::{Zone, ZoneLimit};

/// What the zone guard says about one removal now.
pub enum Admission {
    Go,
    /// The zone is paused.
    Paused(String),
    /// The zone's rate allows the next removal after this wait.
    Later(String, Duration),
}

/// The zones' current states and each paced zone's next free removal slot.
#[derive(Default)]
pub struct ZoneGuard {
    zones: BTreeMap<String, Zone>,
    next_slot: HashMap<String, tokio::time::Instant>,
}

impl ZoneGuard {
    /// Whether a pod in `zone` may be removed now; a paced zone's slot is taken if so.
    pub fn admit(&mut self, zone: String) -> Admission {
        let limit = self
            .zones
            .get(&zone)
            .map_or(ZoneLimit::Unpaced, |z| z.limit);
        match limit {
            ZoneLimit::Unpaced => Admission::Go,
            ZoneLimit::Paused => Admission::Paused(zone),
            ZoneLimit::PerSecond(rate) => {
                let now = tokio::time::Instant::now();
                let slot = self.next_slot.get(&zone).copied().unwrap_or(now);
                if slot > now {
                    return Admission::Later(zone, slot - now);
                }
                self.next_slot
                    .insert(zone, now + Duration::from_secs_f64(1.0 / rate));
                Admission::Go
            }
        }
    }

    /// Takes the zones' states `now`, dropping the slots of zones gone; returns the states
    /// before.
    pub fn update(&mut self, now: BTreeMap<String, Zone>) -> BTreeMap<String, Zone> {
        self.next_slot.retain(|zone, _| now.contains_key(zone));
        std::mem::replace(&mut self.zones, now)
    }
}
