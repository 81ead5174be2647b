//! `kubectl-redis`: the kubectl plugin (`kubectl redis …`). All logic lives in
//! [`redis::plugin`]; this prints failures as one `error: …` line and exits with code 1.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut out = std::io::stdout();
    kit::plugin::finish(redis::plugin::main_with(std::env::args().skip(1), &mut out).await)
}
