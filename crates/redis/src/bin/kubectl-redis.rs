//! `kubectl-redis`: the kubectl plugin (`kubectl redis …`). All logic lives in
//! [`redis::plugin`]; this prints failures as one `error: …` line and exits with code 1.

#[tokio::main]
async fn main() {
    let mut out = std::io::stdout();
    let Err(e) = redis::plugin::main_with(std::env::args().skip(1), &mut out).await else {
        return;
    };
    // Output piped into `head` and closed early is not a failure worth reporting.
    let broken_pipe = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        return;
    }
    match e.downcast_ref::<clap::Error>() {
        Some(usage) => eprint!("{}", usage.render()),
        None => eprintln!("error: {e}"),
    }
    std::process::exit(1);
}
