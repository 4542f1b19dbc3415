use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    taint_manager::run(taint_manager::Args::parse()).await
}
