use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    evictionrequest_controller::main(evictionrequest_controller::Cli::parse()).await
}
