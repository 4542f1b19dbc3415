//! The install commands the documentation prints, read from it so that the installed suite runs
//! exactly those: the README's Install section and each chart's generated README.md. A
//! document whose commands change shape fails [`tests`] here before the suite runs them.

use anyhow::{Context as _, Result, bail, ensure};

/// Where the README's commands say the release is: `<registry>/<path>`.
pub const PLACEHOLDER: &str = "<registry>/<path>";
/// Where a chart's README installs it from (xtask's `release::CHART_REPOSITORY` without
/// `/charts`): the forge's registry and path.
pub const FORGE: &str = "ghcr.io/evictkit";

/// The first ```sh block of `text`: one command per line (a line ending in `\` goes on on the
/// next), each split into words (the documents quote nothing).
fn first_sh_block(text: &str) -> Result<Vec<Vec<String>>> {
    let block = text
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .context("no ```sh block")?
        .0;
    Ok(block
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect())
}

/// The README's Install commands with `<registry>/<path>` replaced by `prefix`: a `helm
/// install` of the umbrella from `oci://` with `global.imageRegistry` and nothing built, then
/// `kubectl` commands.
pub fn install_commands(readme: &str, prefix: &str) -> Result<Vec<Vec<String>>> {
    let section = readme
        .split_once("\n## Install\n")
        .context("README.md has no ## Install section")?
        .1;
    let commands = first_sh_block(section).context("README.md's Install section")?;
    let mut substituted = Vec::new();
    for command in commands {
        let command: Vec<String> = command
            .iter()
            .map(|word| word.replace(PLACEHOLDER, prefix))
            .collect();
        if let Some(word) = command.iter().find(|word| word.contains('<')) {
            bail!(
                "README.md's Install command {command:?} keeps a placeholder other than {PLACEHOLDER}: {word}"
            );
        }
        ensure!(
            matches!(command[0].as_str(), "helm" | "kubectl"),
            "README.md's Install section runs {:?}: only helm and kubectl are at hand",
            command[0]
        );
        ensure!(
            command[..2] != ["helm", "dependency"],
            "README.md's Install section builds chart dependencies: a release's charts hold theirs"
        );
        substituted.push(command);
    }
    let install = substituted
        .iter()
        .find(|command| command[..2] == ["helm", "install"])
        .context("README.md's Install section has no helm install")?;
    ensure!(
        install
            .iter()
            .any(|word| *word == format!("oci://{prefix}/charts/evictkit")),
        "README.md's helm install is not of oci://{PLACEHOLDER}/charts/evictkit: {install:?}"
    );
    ensure!(
        install
            .iter()
            .any(|word| *word == format!("global.imageRegistry={prefix}")),
        "README.md's helm install does not set global.imageRegistry={PLACEHOLDER}: {install:?}"
    );
    Ok(substituted)
}

/// A chart README's install command, from `prefix` instead of the forge's registry.
pub fn chart_install_command(chart_readme: &str, prefix: &str) -> Result<Vec<String>> {
    let commands = first_sh_block(chart_readme).context("a chart README")?;
    let [command] = commands.as_slice() else {
        bail!("a chart README's first block holds {commands:?}, not one command");
    };
    ensure!(
        command[..2] == ["helm", "install"],
        "a chart README's command is not a helm install: {command:?}"
    );
    Ok(command
        .iter()
        .map(|word| word.replacen(&format!("oci://{FORGE}/"), &format!("oci://{prefix}/"), 1))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[test]
    fn the_readme_installs_the_umbrella_from_a_registry() {
        let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
        let commands = install_commands(&readme, "127.0.0.1:5000/evictkit").unwrap();
        let install = commands
            .iter()
            .find(|command| command[..2] == ["helm", "install"])
            .unwrap();
        assert!(install.contains(&"oci://127.0.0.1:5000/evictkit/charts/evictkit".to_owned()));
        assert!(install.contains(&env!("CARGO_PKG_VERSION").to_owned()));
    }

    #[test]
    fn a_readme_that_builds_dependencies_or_keeps_a_placeholder_is_refused() {
        let good = "x\n## Install\n\n```sh\nhelm install evictkit oci://<registry>/<path>/charts/evictkit \\\n  --set global.imageRegistry=<registry>/<path>\n```\n";
        assert_eq!(
            install_commands(good, "r/p").unwrap(),
            [[
                "helm",
                "install",
                "evictkit",
                "oci://r/p/charts/evictkit",
                "--set",
                "global.imageRegistry=r/p"
            ]]
        );
        for bad in [
            good.replace("```sh\n", "```sh\nhelm dependency build charts/evictkit\n"),
            good.replace("<path>/charts", "<path>/<chart>"),
            good.replace("global.imageRegistry", "image.registry"),
            good.replace("helm install", "docker load && helm install"),
        ] {
            assert!(install_commands(&bad, "r/p").is_err(), "{bad}");
        }
    }

    #[test]
    fn each_charts_readme_installs_it_from_the_forge() {
        for chart in [
            "evictkit",
            "affinity-evictor",
            "taint-manager",
            "pdb-policy-webhook",
            "evictionrequest-controller",
            "descheduler-bridge",
        ] {
            let readme =
                std::fs::read_to_string(root().join("charts").join(chart).join("README.md"))
                    .unwrap();
            let command = chart_install_command(&readme, "127.0.0.1:5000/evictkit").unwrap();
            assert!(
                command.contains(&format!("oci://127.0.0.1:5000/evictkit/charts/{chart}")),
                "{command:?}"
            );
        }
    }
}
