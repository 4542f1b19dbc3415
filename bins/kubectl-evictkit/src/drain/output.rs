//! How the drain prints, and the words its text and its JSON lines both use for the API a pod
//! is asked to go through.

use evictkit_drain::Channel;

/// How the drain prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Text,
    Json,
}

/// The API a pod is asked through, as both outputs name it.
pub fn through(channel: Channel) -> &'static str {
    match channel {
        Channel::Lifecycle => "a lifecycle.k8s.io EvictionRequest",
        Channel::Crd => "an evictkit.io EvictionRequest",
        Channel::Eviction => "the Eviction API",
    }
}
