//! The umbrella chart's component blocks: the values block each component subchart takes
//! (its dependency's `condition`), and which of them serve webhooks.

use std::path::Path;

use anyhow::Result;

use super::render::read_yaml;

/// The umbrella's component blocks and the charts they hand their values to.
pub(super) struct Block {
    pub(super) block: String,
    pub(super) chart: String,
}

/// The umbrella's blocks of the components that serve webhooks: each component block (see
/// [`component_blocks`]) whose subchart has `webhook.certificate` values.
pub fn webhook_blocks(umbrella: &Path) -> Result<Vec<String>> {
    let mut blocks = Vec::new();
    for Block { block, chart } in component_blocks(umbrella)? {
        let values = read_yaml(&umbrella.join("..").join(chart).join("values.yaml"))?;
        if !values["webhook"]["certificate"].is_null() {
            blocks.push(block);
        }
    }
    Ok(blocks)
}

/// The umbrella's component blocks: each subchart dependency's `condition: <block>.enabled`
/// (other blocks with a switch, such as the dashboard's, are no component).
pub(super) fn component_blocks(umbrella: &Path) -> Result<Vec<Block>> {
    let chart = read_yaml(&umbrella.join("Chart.yaml"))?;
    let mut blocks = Vec::new();
    for dependency in chart["dependencies"].as_array().into_iter().flatten() {
        let Some(block) = dependency["condition"]
            .as_str()
            .and_then(|condition| condition.strip_suffix(".enabled"))
        else {
            continue;
        };
        blocks.push(Block {
            block: block.to_owned(),
            chart: dependency["name"].as_str().unwrap_or_default().to_owned(),
        });
    }
    Ok(blocks)
}
