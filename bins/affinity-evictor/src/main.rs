use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    affinity_evictor::run(affinity_evictor::Args::parse()).await
}
