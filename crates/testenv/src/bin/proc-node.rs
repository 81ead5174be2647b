//! `proc-node`: the process-backed node agent of the local plane (`proc-node agent …`), and
//! the small stages it runs its containers through (`shim`, `init`, `exec`). See
//! `testenv::procnode`.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(testenv::procnode::main(std::env::args().collect()) as u8)
}
