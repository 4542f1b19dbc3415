//! Hand-written schemas for the few Kubernetes types used inside our CRDs.
//!
//! k8s-openapi's `JsonSchema` impls sit behind its `schemars` feature, which would compile
//! schemas for every Kubernetes type into every crate of the workspace; and they lack the
//! limits (`maxLength`, `maxItems`, `pattern`, `enum`) that the Go types carry as kubebuilder
//! markers and that CEL cost estimation needs. These functions restate them.

use schemars::{Schema, SchemaGenerator, json_schema};

/// `metav1.Time`: an RFC 3339 timestamp (a CEL `timestamp` in validation rules).
pub fn time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "date-time",
    })
}

/// `[]metav1.Condition` with the markers of the Go type, as a map list keyed by `type`.
pub fn conditions(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "maxItems": 32,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "description": "Condition contains details for one aspect of the current state of this API Resource.",
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
            "properties": {
                "lastTransitionTime": {
                    "description": "lastTransitionTime is the last time the condition transitioned from one status to another.",
                    "type": "string",
                    "format": "date-time",
                },
                "message": {
                    "description": "message is a human readable message indicating details about the transition. This may be an empty string.",
                    "type": "string",
                    "maxLength": 32768,
                },
                "observedGeneration": {
                    "description": "observedGeneration represents the .metadata.generation that the condition was set based upon.",
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0,
                },
                "reason": {
                    "description": "reason contains a programmatic identifier indicating the reason for the condition's last transition.",
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 1024,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                },
                "status": {
                    "description": "status of the condition, one of True, False, Unknown.",
                    "type": "string",
                    "enum": ["True", "False", "Unknown"],
                },
                "type": {
                    "description": "type of condition in CamelCase or in foo.example.com/CamelCase.",
                    "type": "string",
                    "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                },
            },
        },
    })
}

/// `metav1.LabelSelector`, with the limits of the Go type's validation.
pub fn label_selector(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "description": "A label query over a set of resources. The result of matchLabels and matchExpressions are ANDed. An empty label selector matches all objects.",
        "x-kubernetes-map-type": "atomic",
        "properties": {
            "matchLabels": {
                "description": "matchLabels is a map of {key,value} pairs; each is a requirement key In [value].",
                "type": "object",
                "additionalProperties": {"type": "string", "maxLength": 63},
            },
            "matchExpressions": {
                "description": "matchExpressions is a list of label selector requirements. The requirements are ANDed.",
                "type": "array",
                "maxItems": 64,
                "x-kubernetes-list-type": "atomic",
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"description": "key is the label key that the selector applies to.", "type": "string", "maxLength": 317},
                        "operator": {"description": "operator represents a key's relationship to a set of values.", "type": "string", "enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                        "values": {
                            "description": "values is an array of string values; non-empty for In and NotIn, empty for Exists and DoesNotExist.",
                            "type": "array",
                            "maxItems": 64,
                            "x-kubernetes-list-type": "atomic",
                            "items": {"type": "string", "maxLength": 63},
                        },
                    },
                },
            },
        },
    })
}
