use clap::Parser;
use jobq_dash::Config;

#[tokio::main]
async fn main() {
    let cfg = Config::parse();
    let listen = cfg.listen.clone();
    let prefix = cfg.prefix();
    let router = match jobq_dash::router(cfg).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("jobq-dash: {e}");
            std::process::exit(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(&listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("jobq-dash: cannot listen on {listen}: {e}");
            std::process::exit(2);
        }
    };
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or(listen);
    eprintln!("jobq-dash: serving http://{addr}{prefix}/");
    if let Err(e) = jobq_dash::serve(listener, router).await {
        eprintln!("jobq-dash: {e}");
        std::process::exit(1);
    }
}
