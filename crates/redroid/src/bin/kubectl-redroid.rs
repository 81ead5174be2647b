//! `kubectl-redroid`: the kubectl plugin (`kubectl redroid …`). All logic lives in
//! [`redroid::plugin`]; this prints failures as one `error: …` line and exits with code 1.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut out = std::io::stdout();
    kit::plugin::finish(redroid::plugin::main_with(std::env::args().skip(1), &mut out).await)
}
