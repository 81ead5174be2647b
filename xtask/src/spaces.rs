//! `cargo xtask spaces up|down|status|kubectl`: a named set of separate control planes (a WDS,
//! an ITS and WECs; `testenv::spaces`), beside and independent of the single local plane.

use std::process::Command;

use clap::Subcommand;
use testenv::spaces::{self, Topology};

#[derive(Subcommand)]
pub enum Cmd {
    /// Start (or reuse) wds1, its1 and wec1..wecN.
    Up {
        /// Number of WECs.
        #[arg(long, default_value_t = 2)]
        wecs: usize,
    },
    /// Stop every space and remove their state.
    Down,
    /// Which components run, their memory and CPU, and each space's kubeconfig.
    Status,
    /// The pinned kubectl against one space.
    Kubectl {
        /// The space, e.g. wds1.
        space: String,
        /// Arguments passed to kubectl.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

pub fn run(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Up { wecs } => {
            anyhow::ensure!(wecs >= 1, "at least one WEC");
            let up = spaces::up(&Topology::standard(wecs))?;
            let verb = if up.reused { "reused" } else { "started" };
            println!("{verb} {} spaces in {:.1?}", up.state.spaces.len(), up.took);
            print_status(&up.state);
            Ok(())
        }
        Cmd::Down => {
            let was = spaces::down()?;
            println!(
                "{}",
                if was {
                    "spaces stopped"
                } else {
                    "no spaces were running"
                }
            );
            Ok(())
        }
        Cmd::Status => {
            match spaces::read_state() {
                None => println!("no spaces recorded in {}", spaces::spaces_dir().display()),
                Some(state) => print_status(&state),
            }
            Ok(())
        }
        Cmd::Kubectl { space, args } => {
            let state = spaces::read_state()
                .ok_or_else(|| anyhow::anyhow!("no spaces: run cargo xtask spaces up"))?;
            anyhow::ensure!(state.space(&space).is_some(), "no space named {space:?}");
            let status = Command::new(state.bin_dir.join("kubectl"))
                .arg(format!(
                    "--kubeconfig={}",
                    spaces::kubeconfig(&space).display()
                ))
                .args(&args)
                .status()?;
            anyhow::ensure!(status.success(), "kubectl {} failed", args.join(" "));
            Ok(())
        }
    }
}

fn print_status(state: &spaces::State) {
    let usage = spaces::usage(state);
    println!(
        "kubernetes {}, etcd on 127.0.0.1:{}",
        state.kubernetes, state.etcd_port
    );
    for u in &usage {
        println!(
            "  {:<32} pid {:<8} {:<12} rss {:>7.1} MiB  cpu {:>7.1} s",
            u.name,
            u.pid,
            if u.alive { "running" } else { "NOT RUNNING" },
            u.rss_kib as f64 / 1024.0,
            u.cpu_seconds
        );
    }
    let total: u64 = usage.iter().map(|u| u.rss_kib).sum();
    println!("  total rss {:.1} MiB", total as f64 / 1024.0);
    for s in &state.spaces {
        println!(
            "  {:<6} {:<4} https://127.0.0.1:{:<6} KUBECONFIG={}",
            s.name,
            s.role.as_str(),
            s.api_port,
            spaces::kubeconfig(&s.name).display()
        );
    }
}
