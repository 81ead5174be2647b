//! `kubectl-fdb`: the kubectl plugin (`kubectl fdb …`). All logic lives in [`fdb::plugin`];
//! this prints failures as one `error: …` line and exits with code 1.

#[tokio::main]
async fn main() {
    let mut stdout = std::io::stdout();
    let mut stderr = std::io::stderr();
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut io = fdb::plugin::Io {
        out: &mut stdout,
        err: &mut stderr,
        input: &mut input,
    };
    let Err(e) = fdb::plugin::main_with(std::env::args().skip(1), &mut io).await else {
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
