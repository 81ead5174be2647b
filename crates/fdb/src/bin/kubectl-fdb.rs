//! `kubectl-fdb`: the kubectl plugin (`kubectl fdb …`). All logic lives in [`fdb::plugin`];
//! this prints failures as one `error: …` line and exits with code 1.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut io = fdb::plugin::Io {
        out: &mut stdout,
        err: &mut stderr,
        input: &mut input,
    };
    kit::plugin::finish(fdb::plugin::main_with(std::env::args().skip(1), &mut io).await)
}
