//! `cargo xtask chart-docs`: each chart's `README.md` (a helm-docs style table of its values)
//! and `values.schema.json`, generated from its `values.yaml`, never edited by hand.
//!
//! The values themselves come from the YAML parser; what it drops, the comments, comes from a
//! line scan: the comment lines right above a key describe it, and a comment line
//! `# @schema {...}` is merged over the schema inferred from the key's default (an enum, an
//! integer, `{"properties": {}, "additionalProperties": true}` for a free-form map such as
//! `resources`). Inferred: an object with keys accepts only those keys, an empty object
//! (`annotations: {}`) any; a number is a `number`, a list an `array`.
//!
//! A chart's `sizing.md`, when it has one, follows the values as the README's "Sizing" section:
//! the measured memory by cluster size its `resources` defaults were chosen from.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

use crate::crds::Output;

const README_HEADER: &str =
    "<!-- Generated from values.yaml by cargo xtask chart-docs; do not edit. -->\n";

/// A key of values.yaml as the line scan sees it, in file order.
#[derive(Debug, PartialEq)]
struct Key {
    path: Vec<String>,
    /// The comment lines right above the key, joined.
    description: String,
    /// `# @schema {...}` above the key.
    schema: Option<Map<String, Value>>,
}

/// Write every chart's README.md and values.schema.json.
pub fn generate() -> Result<()> {
    let root = evictkit_harness::workspace_root();
    for out in plan()? {
        out.write(&root)?;
    }
    Ok(())
}

/// Fail when a chart's README.md or values.schema.json differs from what chart-docs writes.
pub fn check() -> Result<()> {
    let root = evictkit_harness::workspace_root();
    let plan = plan()?;
    let stale: Vec<String> = plan
        .iter()
        .filter(|out| !out.is_current(&root))
        .map(|out| format!("{} is stale", out.path.display()))
        .collect();
    if !stale.is_empty() {
        bail!("{}: run cargo xtask chart-docs", stale.join(", "));
    }
    println!("{} generated chart files are up to date", plan.len());
    Ok(())
}

/// README.md and values.schema.json of every application chart (a library has no values).
fn plan() -> Result<Vec<Output>> {
    let root = evictkit_harness::workspace_root();
    let mut outputs = Vec::new();
    let mut dirs: Vec<PathBuf> = fs::read_dir(root.join("charts"))?
        .filter_map(|entry| {
            entry
                .ok()
                .map(|entry| Path::new("charts").join(entry.file_name()))
        })
        .filter(|dir| root.join(dir).join("Chart.yaml").is_file())
        .collect();
    dirs.sort();
    for dir in dirs {
        let chart = read_yaml(&root.join(&dir).join("Chart.yaml"))?;
        if chart.get("type").and_then(Value::as_str) == Some("library") {
            continue;
        }
        let values_path = dir.join("values.yaml");
        let text = fs::read_to_string(root.join(&values_path))
            .with_context(|| format!("reading {}", values_path.display()))?;
        let values: Value = serde_saphyr::from_str(&text)
            .with_context(|| format!("parsing {}", values_path.display()))?;
        let keys = scan(&text).with_context(|| format!("scanning {}", values_path.display()))?;
        let mut schema = schema(&values, &keys);
        allow_dependency_blocks(&mut schema, &chart);
        outputs.push(Output {
            path: dir.join("values.schema.json"),
            contents: serde_json::to_string_pretty(&schema)? + "\n",
        });
        let sizing_path = root.join(&dir).join("sizing.md");
        let sizing = match fs::read_to_string(&sizing_path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("reading {}", sizing_path.display())),
        };
        outputs.push(Output {
            path: dir.join("README.md"),
            contents: readme(&chart, &values, &schema, &keys, sizing.as_deref()),
        });
    }
    Ok(outputs)
}

fn read_yaml(path: &Path) -> Result<Value> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The keys of a values.yaml with their comments. Lines inside lists are skipped (a list is
/// documented as a whole); a blank line ends a comment that belongs to no key.
fn scan(text: &str) -> Result<Vec<Key>> {
    let mut keys = Vec::new();
    let mut parents: Vec<(usize, String)> = Vec::new();
    let mut description: Vec<&str> = Vec::new();
    let mut schema = None;
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(comment) = trimmed.strip_prefix('#') {
            let comment = comment.trim();
            if let Some(json) = comment.strip_prefix("@schema") {
                let parsed = serde_json::from_str(json).with_context(|| {
                    format!("line {}: @schema is not a JSON object", number + 1)
                })?;
                schema = Some(parsed);
            } else if !comment.is_empty() {
                description.push(comment);
            }
            continue;
        }
        let Some(key) = key_of(trimmed).filter(|_| !trimmed.starts_with('-')) else {
            description.clear();
            schema = None;
            continue;
        };
        while parents.last().is_some_and(|(level, _)| *level >= indent) {
            parents.pop();
        }
        let mut path: Vec<String> = parents.iter().map(|(_, name)| name.clone()).collect();
        path.push(key.clone());
        parents.push((indent, key));
        keys.push(Key {
            path,
            description: description.join(" "),
            schema: schema.take(),
        });
        description.clear();
    }
    Ok(keys)
}

/// `name` of a `name: ...` or `name:` line; quotes around the name are dropped.
fn key_of(line: &str) -> Option<String> {
    let (name, rest) = line.split_once(':')?;
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    let name = name.trim_matches(|c| c == '"' || c == '\'');
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    (!name.is_empty() && name.chars().all(plain)).then(|| name.to_owned())
}

/// The JSON schema of a chart's values: the type of each default, objects closed to unknown
/// keys, each key's `@schema` merged over.
fn schema(values: &Value, keys: &[Key]) -> Value {
    let by_path: BTreeMap<&[String], &Key> =
        keys.iter().map(|key| (key.path.as_slice(), key)).collect();
    let mut root = schema_of(values, &mut Vec::new(), &by_path);
    root.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft-07/schema#"),
    );
    Value::Object(root)
}

/// Helm gives each dependency a block of the chart's values (named by its alias, else its
/// name), even a library's that has no values: the schema allows those blocks too.
fn allow_dependency_blocks(schema: &mut Value, chart: &Value) {
    let Some(properties) = schema["properties"].as_object_mut() else {
        return;
    };
    let dependencies = chart["dependencies"].as_array().into_iter().flatten();
    for dependency in dependencies {
        let block = dependency["alias"].as_str().or(dependency["name"].as_str());
        if let Some(block) = block {
            properties
                .entry(block)
                .or_insert_with(|| json!({"type": "object"}));
        }
    }
}

fn schema_of(
    value: &Value,
    path: &mut Vec<String>,
    keys: &BTreeMap<&[String], &Key>,
) -> Map<String, Value> {
    let mut schema = Map::new();
    match value {
        Value::Object(fields) if !fields.is_empty() => {
            let mut properties = Map::new();
            for (name, field) in fields {
                path.push(name.clone());
                properties.insert(name.clone(), Value::Object(schema_of(field, path, keys)));
                path.pop();
            }
            schema.insert("type".into(), json!("object"));
            schema.insert("additionalProperties".into(), json!(false));
            schema.insert("properties".into(), Value::Object(properties));
        }
        Value::Object(_) => {
            schema.insert("type".into(), json!("object"));
        }
        Value::Array(_) => {
            schema.insert("type".into(), json!("array"));
        }
        Value::String(_) => {
            schema.insert("type".into(), json!("string"));
        }
        Value::Bool(_) => {
            schema.insert("type".into(), json!("boolean"));
        }
        Value::Number(_) => {
            schema.insert("type".into(), json!("number"));
        }
        Value::Null => {}
    }
    if let Some(key) = keys.get(path.as_slice()) {
        if !key.description.is_empty() {
            schema.insert("description".into(), json!(key.description));
        }
        for (name, value) in key.schema.iter().flatten() {
            schema.insert(name.clone(), value.clone());
        }
    }
    schema
}

/// README.md: the chart's description and a table of its values, in file order. An object
/// whose schema lists its keys gets a row of its own only when it has a comment, then one row
/// per key; anything else (a scalar, a list, a free-form map) is one row with its default.
/// Then the chart's `sizing.md`, if any, as the "Sizing" section.
fn readme(
    chart: &Value,
    values: &Value,
    schema: &Value,
    keys: &[Key],
    sizing: Option<&str>,
) -> String {
    let name = chart.get("name").and_then(Value::as_str).unwrap_or("?");
    let description = chart
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("");
    let version = chart.get("version").and_then(Value::as_str).unwrap_or("?");
    let repository = evictkit_harness::image::CHART_REPOSITORY;
    let mut out = format!(
        "{README_HEADER}# {name}\n\n{description}\n\n\
         ```sh\nhelm install evictkit oci://{repository}/{name} --version {version} \
         --namespace evictkit-system --create-namespace\n```\n\n\
         From a checkout, `helm dependency build charts/{name}` first, then `charts/{name}` in \
         place of the `oci://` reference.\n\n\
         The keys every evictkit chart shares and the library behind them: \
         [charts/README.md](../README.md).\n\n\
         ## Values\n\n| Key | Type | Default | Description |\n|---|---|---|---|\n"
    );
    for key in keys {
        let Some((value, key_schema)) = lookup(values, schema, &key.path) else {
            continue;
        };
        let documented_by_keys = key_schema
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|properties| !properties.is_empty());
        if documented_by_keys && key.description.is_empty() {
            continue;
        }
        let kind = match key_schema.get("type") {
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" or "),
            Some(Value::String(kind)) => kind.clone(),
            _ => "any".into(),
        };
        let default = if documented_by_keys {
            String::new()
        } else {
            format!("`{}`", escape(&value.to_string()))
        };
        let mut description = escape(&key.description);
        if let Some(choices) = key_schema.get("enum").and_then(Value::as_array) {
            let choices: Vec<String> = choices.iter().map(|c| format!("`{c}`")).collect();
            description = format!("{description} One of {}.", choices.join(", "))
                .trim()
                .to_owned();
        }
        out.push_str(&format!(
            "| `{}` | {kind} | {default} | {description} |\n",
            key.path.join(".")
        ));
    }
    if let Some(sizing) = sizing {
        out.push_str(&format!("\n## Sizing\n\n{}\n", sizing.trim()));
    }
    out
}

/// The value and the schema at `path`, when every step is a key of an object whose schema
/// lists its keys (lines inside lists and free-form maps have none).
fn lookup<'a>(
    values: &'a Value,
    schema: &'a Value,
    path: &[String],
) -> Option<(&'a Value, &'a Value)> {
    path.iter()
        .try_fold((values, schema), |(value, schema), name| {
            Some((value.get(name)?, schema.get("properties")?.get(name)?))
        })
}

/// A table cell: `|` would end it, and `<release>` would read as an HTML tag.
fn escape(text: &str) -> String {
    text.replace('|', "\\|").replace('<', "&lt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUES: &str = r#"# A header that describes no key.

# Replicas of the
# Deployment.
# @schema {"type": "integer"}
replicas: 2

webhook:
  # Answer or not.
  enabled: true
  namespaceSelector:
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: NotIn
# Free-form.
# @schema {"properties": {}, "additionalProperties": true}
resources:
  limits:
    memory: 1Gi
annotations: {}
"#;

    fn keys() -> Vec<Key> {
        scan(VALUES).expect("the test values scan")
    }

    #[test]
    fn comments_above_a_key_describe_it_and_list_items_are_no_keys() {
        let keys = keys();
        let paths: Vec<String> = keys.iter().map(|key| key.path.join(".")).collect();
        assert_eq!(
            paths,
            [
                "replicas",
                "webhook",
                "webhook.enabled",
                "webhook.namespaceSelector",
                "webhook.namespaceSelector.matchExpressions",
                "webhook.namespaceSelector.matchExpressions.operator",
                "resources",
                "resources.limits",
                "resources.limits.memory",
                "annotations",
            ]
        );
        assert_eq!(keys[0].description, "Replicas of the Deployment.");
        assert_eq!(
            keys[0]
                .schema
                .as_ref()
                .map(|schema| Value::Object(schema.clone())),
            Some(json!({"type": "integer"}))
        );
        assert_eq!(keys[1].description, "", "a blank line ends the header");
        assert_eq!(keys[2].description, "Answer or not.");
    }

    #[test]
    fn schema_closes_objects_with_keys_and_applies_overrides() {
        let values: Value = serde_saphyr::from_str(VALUES).expect("the test values parse");
        let schema = schema(&values, &keys());
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["properties"]["replicas"]["type"], json!("integer"));
        let webhook = &schema["properties"]["webhook"];
        assert_eq!(webhook["additionalProperties"], json!(false));
        assert_eq!(webhook["properties"]["enabled"]["type"], json!("boolean"));
        assert_eq!(
            webhook["properties"]["namespaceSelector"]["properties"]["matchExpressions"]["type"],
            json!("array")
        );
        let resources = &schema["properties"]["resources"];
        assert_eq!(resources["additionalProperties"], json!(true));
        assert_eq!(resources["properties"], json!({}));
        assert_eq!(
            schema["properties"]["annotations"],
            json!({"type": "object"}),
            "an empty map takes any key"
        );
    }

    #[test]
    fn readme_rows_follow_the_file_and_show_defaults() {
        let values: Value = serde_saphyr::from_str(VALUES).expect("the test values parse");
        let keys = keys();
        let chart = json!({"name": "demo", "description": "A demo | chart."});
        let readme = readme(&chart, &values, &schema(&values, &keys), &keys, None);
        let rows: Vec<&str> = readme
            .lines()
            .filter(|line| line.starts_with("| `"))
            .collect();
        assert_eq!(
            rows,
            [
                "| `replicas` | integer | `2` | Replicas of the Deployment. |",
                "| `webhook.enabled` | boolean | `true` | Answer or not. |",
                "| `webhook.namespaceSelector.matchExpressions` | array | `[{\"key\":\"kubernetes.io/metadata.name\",\"operator\":\"NotIn\"}]` |  |",
                "| `resources` | object | `{\"limits\":{\"memory\":\"1Gi\"}}` | Free-form. |",
                "| `annotations` | object | `{}` |  |",
            ]
        );
        assert!(!readme.contains("## Sizing"), "no sizing.md, no section");
    }

    #[test]
    fn a_charts_sizing_follows_its_values() {
        let values: Value = serde_saphyr::from_str(VALUES).expect("the test values parse");
        let keys = keys();
        let chart = json!({"name": "demo"});
        let sizing = "| pods | RSS |\n|---:|---:|\n| 1,000 | 20 MB |\n";
        let readme = readme(
            &chart,
            &values,
            &schema(&values, &keys),
            &keys,
            Some(sizing),
        );
        let (table, section) = readme
            .split_once("\n## Sizing\n\n")
            .expect("a Sizing section");
        assert!(table.ends_with("| `annotations` | object | `{}` |  |\n"));
        assert_eq!(section, sizing);
    }
}
