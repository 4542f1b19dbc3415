//! Label requirements and label selectors with apimachinery's semantics.
//!
//! Both node selectors (`matchExpressions` of a `NodeSelectorTerm`) and PodDisruptionBudget
//! selectors (`metav1.LabelSelector`) compile to apimachinery `labels.Requirement`s, validated
//! by `labels.NewRequirement`. This module is that shared core: one requirement type, one
//! validation, one matching rule, so the two selector kinds cannot drift apart.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Longest name part of a qualified name (label key), and longest label value.
const MAX_NAME_LEN: usize = 63;
/// Longest DNS-1123 subdomain, the optional prefix of a label key.
const MAX_PREFIX_LEN: usize = 253;

/// The operators a requirement can carry. `Gt` and `Lt` exist only in node selectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// Why one requirement is invalid; the checks are those of apimachinery `labels.NewRequirement`
/// plus the operator check its callers do first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    #[error("key: invalid label key {key:?}: {reason}")]
    InvalidKey { key: String, reason: String },
    #[error("values[{index}]: invalid label value {value:?}: {reason}")]
    InvalidValue {
        index: usize,
        value: String,
        reason: String,
    },
    #[error("values: for 'In', 'NotIn' operators, values set can't be empty")]
    EmptyValues,
    #[error("values: must be empty for 'Exists' and 'DoesNotExist', got {count}")]
    ValuesNotEmpty { count: usize },
    #[error("values: for 'Gt', 'Lt' operators, exactly one value is required, got {count}")]
    NotExactlyOneValue { count: usize },
    #[error(
        "values[{index}]: for 'Gt', 'Lt' operators, the value must be an integer, got {value:?}"
    )]
    NotAnInteger { index: usize, value: String },
    #[error("operator: unsupported value {operator:?}, supported: {}", supported.join(", "))]
    UnsupportedOperator {
        operator: String,
        supported: &'static [&'static str],
    },
}

/// One validated requirement on a set of labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
    /// The parsed operand of `Gt`/`Lt`, checked once at construction.
    bound: Option<i64>,
}

impl Requirement {
    /// Validates like apimachinery `labels.NewRequirement`: every problem is reported, not only
    /// the first, so a user fixing an annotation sees them all at once.
    pub fn new(
        key: &str,
        operator: Operator,
        values: &[String],
    ) -> Result<Self, Vec<RequirementError>> {
        let mut errors = Vec::new();
        if let Err(reason) = validate_qualified_name(key) {
            errors.push(RequirementError::InvalidKey {
                key: key.to_owned(),
                reason,
            });
        }
        let mut bound = None;
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => {
                errors.push(RequirementError::EmptyValues);
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                errors.push(RequirementError::ValuesNotEmpty {
                    count: values.len(),
                });
            }
            Operator::Gt | Operator::Lt => {
                if values.len() != 1 {
                    errors.push(RequirementError::NotExactlyOneValue {
                        count: values.len(),
                    });
                }
                for (index, value) in values.iter().enumerate() {
                    match value.parse::<i64>() {
                        Ok(n) => bound = Some(n),
                        Err(_) => errors.push(RequirementError::NotAnInteger {
                            index,
                            value: value.clone(),
                        }),
                    }
                }
            }
            _ => {}
        }
        for (index, value) in values.iter().enumerate() {
            if let Err(reason) = validate_label_value(value) {
                errors.push(RequirementError::InvalidValue {
                    index,
                    value: value.clone(),
                    reason,
                });
            }
        }
        if errors.is_empty() {
            Ok(Requirement {
                key: key.to_owned(),
                operator,
                values: values.to_vec(),
                bound,
            })
        } else {
            Err(errors)
        }
    }

    /// The `key: value` requirement a `matchLabels` entry stands for (`selection.Equals`), which
    /// matches exactly like `In` with one value.
    pub fn equals(key: &str, value: &str) -> Result<Self, Vec<RequirementError>> {
        Requirement::new(key, Operator::In, &[value.to_owned()])
    }

    /// apimachinery `Requirement.Matches`: `NotIn` and `DoesNotExist` match a missing key; `Gt`
    /// and `Lt` need the key present with an integer value (Go `strconv.ParseInt`, base 10,
    /// which, like Rust's `i64::from_str`, takes a sign and leading zeros).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt | Operator::Lt => {
                let (Some(value), Some(bound)) = (value, self.bound) else {
                    return false;
                };
                match value.parse::<i64>() {
                    Ok(n) if self.operator == Operator::Gt => n > bound,
                    Ok(n) => n < bound,
                    Err(_) => false,
                }
            }
        }
    }
}

/// Where in a `LabelSelector` a bad requirement sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelSelectorField {
    MatchLabels { key: String },
    MatchExpressions { index: usize },
}

impl fmt::Display for LabelSelectorField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LabelSelectorField::MatchLabels { key } => write!(f, "matchLabels[{key}]"),
            LabelSelectorField::MatchExpressions { index } => {
                write!(f, "matchExpressions[{index}]")
            }
        }
    }
}

/// A `LabelSelector` that apimachinery `LabelSelectorAsSelector` refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {}", join(errors))]
pub struct LabelSelectorError {
    pub field: LabelSelectorField,
    pub errors: Vec<RequirementError>,
}

/// A compiled `metav1.LabelSelector`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelSelectorMatcher {
    /// A nil selector: selects nothing.
    Nothing,
    /// A non-nil selector with no requirements: selects everything (`labels.Everything()`).
    Everything,
    /// All of these must hold.
    All(Vec<Requirement>),
}

const LABEL_SELECTOR_OPERATORS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist"];

impl LabelSelectorMatcher {
    /// apimachinery `LabelSelectorAsSelector`: nil is `Nothing`, empty is `Everything`, and the
    /// first invalid requirement fails the whole selector (callers such as the eviction
    /// subresource then treat the selector as matching no pod).
    pub fn new(selector: Option<&LabelSelector>) -> Result<Self, LabelSelectorError> {
        let Some(selector) = selector else {
            return Ok(LabelSelectorMatcher::Nothing);
        };
        let labels = selector.match_labels.iter().flatten();
        let expressions = selector.match_expressions.iter().flatten();
        let mut requirements = Vec::new();
        for (key, value) in labels {
            let requirement =
                Requirement::equals(key, value).map_err(|errors| LabelSelectorError {
                    field: LabelSelectorField::MatchLabels { key: key.clone() },
                    errors,
                })?;
            requirements.push(requirement);
        }
        for (index, expression) in expressions.enumerate() {
            let field = LabelSelectorField::MatchExpressions { index };
            let operator = match expression.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(LabelSelectorError {
                        field,
                        errors: vec![RequirementError::UnsupportedOperator {
                            operator: other.to_owned(),
                            supported: LABEL_SELECTOR_OPERATORS,
                        }],
                    });
                }
            };
            let values = expression.values.as_deref().unwrap_or_default();
            let requirement = Requirement::new(&expression.key, operator, values)
                .map_err(|errors| LabelSelectorError { field, errors })?;
            requirements.push(requirement);
        }
        if requirements.is_empty() {
            Ok(LabelSelectorMatcher::Everything)
        } else {
            Ok(LabelSelectorMatcher::All(requirements))
        }
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            LabelSelectorMatcher::Nothing => false,
            LabelSelectorMatcher::Everything => true,
            LabelSelectorMatcher::All(requirements) => {
                requirements.iter().all(|r| r.matches(labels))
            }
        }
    }
}

pub(crate) fn join<T: fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// apimachinery `validation.IsQualifiedName`: an optional DNS-1123 subdomain prefix and `/`,
/// then a name of at most 63 characters of `[-A-Za-z0-9_.]`, alphanumeric at both ends.
pub fn validate_qualified_name(key: &str) -> Result<(), String> {
    let mut parts = key.split('/');
    let (prefix, name) = match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, None) => (None, name),
        (Some(prefix), Some(name), None) => (Some(prefix), name),
        _ => return Err("a qualified name has at most one '/'".to_owned()),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err("prefix part must be non-empty".to_owned());
        }
        validate_dns1123_subdomain(prefix).map_err(|reason| format!("prefix part {reason}"))?;
    }
    if name.is_empty() {
        return Err("name part must be non-empty".to_owned());
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "name part must be no more than {MAX_NAME_LEN} characters"
        ));
    }
    if !is_label_token(name) {
        return Err(
            "name part must consist of alphanumeric characters, '-', '_' or '.', \
                    and must start and end with an alphanumeric character"
                .to_owned(),
        );
    }
    Ok(())
}

/// apimachinery `validation.IsValidLabelValue`: empty, or at most 63 characters of
/// `[-A-Za-z0-9_.]`, alphanumeric at both ends.
pub fn validate_label_value(value: &str) -> Result<(), String> {
    if value.len() > MAX_NAME_LEN {
        return Err(format!("must be no more than {MAX_NAME_LEN} characters"));
    }
    if !value.is_empty() && !is_label_token(value) {
        return Err(
            "a valid label must be an empty string or consist of alphanumeric characters, \
                    '-', '_' or '.', and must start and end with an alphanumeric character"
                .to_owned(),
        );
    }
    Ok(())
}

fn is_label_token(s: &str) -> bool {
    let bytes = s.as_bytes();
    let inner_ok = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ends_ok = bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    inner_ok && ends_ok
}

fn validate_dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.len() > MAX_PREFIX_LEN {
        return Err(format!("must be no more than {MAX_PREFIX_LEN} characters"));
    }
    let label_ok = |label: &str| {
        let bytes = label.as_bytes();
        let lower_alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        bytes.first().is_some_and(lower_alnum)
            && bytes.last().is_some_and(lower_alnum)
            && bytes.iter().all(|b| lower_alnum(b) || *b == b'-')
    };
    if s.split('.').all(label_ok) {
        Ok(())
    } else {
        Err("must be a lowercase RFC 1123 subdomain".to_owned())
    }
}

#[cfg(test)]
mod tests;
