use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    descheduler_bridge::run(descheduler_bridge::Args::parse()).await
}
