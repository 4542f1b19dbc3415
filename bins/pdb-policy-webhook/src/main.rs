use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    pdb_policy_webhook::main(pdb_policy_webhook::Cli::parse()).await
}
