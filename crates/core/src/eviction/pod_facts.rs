//! What the eviction decisions read of a pod. `explain` reads it of the API's `Pod`; a watch
//! cache keeps exactly this and nothing else (pdb-policy-webhook's `CachedPod`), so the
//! decisions take any [`PodFacts`] rather than a `Pod`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::objects::pod_conditions;

/// The facts of a pod the eviction subresource and the stricter rules decide on: identity,
/// labels (PDB selectors), deletionTimestamp, phase, which conditions are True, and the
/// volumes that may keep data on the node.
pub trait PodFacts {
    /// Name, namespace, UID and deletionTimestamp (a cache may keep nothing else of it: the
    /// labels are [`PodFacts::labels`]).
    fn metadata(&self) -> &ObjectMeta;
    fn labels(&self) -> &BTreeMap<String, String>;
    fn phase(&self) -> Option<&str>;
    /// Whether the pod has a condition of this type with status `True`.
    fn condition_true(&self, type_: &str) -> bool;
    /// The volumes that may keep data on the node or name a claim ([`PodVolume::of`]), in the
    /// pod's order.
    fn volumes(&self) -> impl Iterator<Item = PodVolume<&str>>;

    fn name(&self) -> Option<&str> {
        self.metadata().name.as_deref()
    }

    fn namespace(&self) -> Option<&str> {
        self.metadata().namespace.as_deref()
    }

    fn uid(&self) -> Option<&str> {
        self.metadata().uid.as_deref()
    }

    /// `metadata.deletionTimestamp` is set.
    fn terminating(&self) -> bool {
        self.metadata().deletion_timestamp.is_some()
    }
}

/// A volume of a pod as the stricter rules read it: a source that may keep data on the node
/// (hostPath, emptyDir) or names a PersistentVolumeClaim (persistentVolumeClaim, a generic
/// ephemeral volume). `S` is `&str` read of a `Pod`, `String` where a cache owns it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodVolume<S> {
    pub name: S,
    pub source: VolumeSource<S>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum VolumeSource<S> {
    HostPath,
    EmptyDir {
        in_memory: bool,
    },
    PersistentVolumeClaim {
        claim_name: S,
    },
    /// A generic ephemeral volume: its claim is named after the pod and the volume.
    Ephemeral,
}

impl<'a> PodVolume<&'a str> {
    /// `volume` as the rules read it; `None` for the sources they never read (configMap,
    /// secret, projected, ...), which keep nothing on the node.
    pub fn of(volume: &'a Volume) -> Option<Self> {
        let source = if volume.host_path.is_some() {
            VolumeSource::HostPath
        } else if let Some(empty_dir) = &volume.empty_dir {
            VolumeSource::EmptyDir {
                in_memory: empty_dir.medium.as_deref() == Some("Memory"),
            }
        } else if let Some(claim) = &volume.persistent_volume_claim {
            VolumeSource::PersistentVolumeClaim {
                claim_name: claim.claim_name.as_str(),
            }
        } else if volume.ephemeral.is_some() {
            VolumeSource::Ephemeral
        } else {
            return None;
        };
        Some(PodVolume {
            name: &volume.name,
            source,
        })
    }

    pub fn owned(&self) -> PodVolume<String> {
        PodVolume {
            name: self.name.to_owned(),
            source: match self.source {
                VolumeSource::HostPath => VolumeSource::HostPath,
                VolumeSource::EmptyDir { in_memory } => VolumeSource::EmptyDir { in_memory },
                VolumeSource::PersistentVolumeClaim { claim_name } => {
                    VolumeSource::PersistentVolumeClaim {
                        claim_name: claim_name.to_owned(),
                    }
                }
                VolumeSource::Ephemeral => VolumeSource::Ephemeral,
            },
        }
    }
}

impl PodVolume<String> {
    pub fn as_view(&self) -> PodVolume<&str> {
        PodVolume {
            name: &self.name,
            source: match &self.source {
                VolumeSource::HostPath => VolumeSource::HostPath,
                VolumeSource::EmptyDir { in_memory } => VolumeSource::EmptyDir {
                    in_memory: *in_memory,
                },
                VolumeSource::PersistentVolumeClaim { claim_name } => {
                    VolumeSource::PersistentVolumeClaim { claim_name }
                }
                VolumeSource::Ephemeral => VolumeSource::Ephemeral,
            },
        }
    }
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl PodFacts for Pod {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn labels(&self) -> &BTreeMap<String, String> {
        self.metadata.labels.as_ref().unwrap_or(&NO_LABELS)
    }

    fn phase(&self) -> Option<&str> {
        self.status.as_ref()?.phase.as_deref()
    }

    fn condition_true(&self, type_: &str) -> bool {
        pod_conditions(self).any(|c| c.type_ == type_ && c.status == "True")
    }

    fn volumes(&self) -> impl Iterator<Item = PodVolume<&str>> {
        let volumes = self.spec.as_ref().and_then(|s| s.volumes.as_ref());
        volumes.into_iter().flatten().filter_map(PodVolume::of)
    }
}

/// A slice of pods to decide on may hold references (the subject beside a cache's pods).
impl<P: PodFacts + ?Sized> PodFacts for &P {
    fn metadata(&self) -> &ObjectMeta {
        (**self).metadata()
    }

    fn labels(&self) -> &BTreeMap<String, String> {
        (**self).labels()
    }

    fn phase(&self) -> Option<&str> {
        (**self).phase()
    }

    fn condition_true(&self, type_: &str) -> bool {
        (**self).condition_true(type_)
    }

    fn volumes(&self) -> impl Iterator<Item = PodVolume<&str>> {
        (**self).volumes()
    }
}
