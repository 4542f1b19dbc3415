//! What the real node runs on from Debian (containerd, runc, the CNI plugins, iptables,
//! conntrack, iproute2), installed when missing, and the paths of the binaries the harness
//! runs from them.

use anyhow::Result;

use crate::packages::{self, Need};

const DEBIAN_PACKAGES: [Need; 6] = [
    ("/usr/bin/containerd", "containerd"),
    ("/usr/sbin/runc", "runc"),
    ("/usr/lib/cni/bridge", "containernetworking-plugins"),
    ("/usr/sbin/iptables", "iptables"),
    ("/usr/sbin/conntrack", "conntrack"),
    ("/usr/sbin/ip", "iproute2"),
];
pub(super) const CONTAINERD: &str = "/usr/bin/containerd";
pub(super) const CTR: &str = "/usr/bin/ctr";

/// Installs the Debian packages the real node needs.
pub(super) fn ensure() -> Result<()> {
    packages::ensure(&DEBIAN_PACKAGES, "the real node")
}
