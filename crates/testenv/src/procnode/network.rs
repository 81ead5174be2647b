//! Pod networking on loopback addresses, in network namespaces the agent makes.
//!
//! ```text
//!  host (root netns)                fabric netns flotilla<k>-fabric      pod netns flotilla<k>-<uid>
//!  flotilla<k> 127.<2+k>.255.254 ── uplink ─┐                           ┌─ eth0 127.<2+k>.<node>.<n>/32
//!  local route 127.<2+k>.0.0/16             br0 ── fl<k><uid…> (veth) ──┘   lo 127.0.0.1 (its own)
//! ```
//!
//! Contract:
//! - A pod network slot `k` (0..8) is held by a flock on `/run/flotilla/pod-network-<k>.lock`
//!   for the agent's lifetime, so two planes on one host never share addresses or names.
//! - Pods get `127.<2+k>.<node>.<2..254>`; the host reaches them through one veth into the
//!   fabric's bridge (a `local`-table route for `127.<2+k>.0.0/16` overrides the host's
//!   `127.0.0.0/8` loopback route for that range only), pods reach each other on the bridge,
//!   and the rest of `127.0.0.0/8` through the host end (the gateway), except `127.0.0.1`,
//!   which stays each pod's own. No route leads anywhere else: nothing leaves loopback.
//! - The gateway address is host-local: the agent's apiserver proxy (`:443`) and its kubelet
//!   endpoint listen there, and host services that pods must reach bind it.
//! - `route_localnet` is enabled only on the interfaces made here.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::sched::{CloneFlags, setns};

use super::layout::{netns_name, netns_prefix};

/// How many planes may run pod networks on one host.
pub const MAX_SLOTS: u8 = 8;

/// A held pod network slot.
#[derive(Debug)]
pub struct Slot {
    /// `k`.
    pub index: u8,
    _lock: File,
}

impl Slot {
    /// Takes the lowest free slot.
    pub fn acquire() -> io::Result<Self> {
        fs::create_dir_all("/run/flotilla")?;
        for index in 0..MAX_SLOTS {
            let f = File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(format!("/run/flotilla/pod-network-{index}.lock"))?;
            if f.try_lock().is_ok() {
                return Ok(Self { index, _lock: f });
            }
        }
        Err(io::Error::other(format!(
            "all {MAX_SLOTS} pod network slots are taken by other planes on this host"
        )))
    }
}

/// The host end's address (the pods' gateway, the apiserver proxy, the kubelet endpoint).
pub fn gateway(slot: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 2 + slot, 255, 254)
}

/// Every gateway address any slot may use (the apiserver certificate names them all).
pub fn all_gateways() -> Vec<Ipv4Addr> {
    (0..MAX_SLOTS).map(gateway).collect()
}

/// The pod CIDR of node `node` in `slot`.
pub fn pod_cidr(slot: u8, node: usize) -> String {
    format!("127.{}.{node}.0/24", 2 + slot)
}

/// Free addresses per node.
#[derive(Debug, Default)]
pub struct Ipam {
    used: Vec<BTreeSet<u8>>,
}

impl Ipam {
    /// Takes the lowest free address of `node` (hosts .2 to .254).
    pub fn allocate(&mut self, slot: u8, node: usize) -> Option<Ipv4Addr> {
        if self.used.len() <= node {
            self.used.resize(node + 1, BTreeSet::new());
        }
        let used = &mut self.used[node];
        let host = (2..=254u8).find(|h| !used.contains(h))?;
        used.insert(host);
        Some(Ipv4Addr::new(127, 2 + slot, node as u8, host))
    }

    /// Returns `ip` to the pool.
    pub fn release(&mut self, ip: Ipv4Addr) {
        let [_, _, node, host] = ip.octets();
        if let Some(used) = self.used.get_mut(node as usize) {
            used.remove(&host);
        }
    }
}

fn fabric(slot: u8) -> String {
    format!("{}fabric", netns_prefix(slot))
}

fn host_link(slot: u8) -> String {
    format!("flotilla{slot}")
}

/// Runs `ip args…`; with `batch`, feeds it as `-batch -` input.
fn ip(args: &[&str], batch: Option<&str>) -> io::Result<()> {
    // Debian's path: root's PATH usually has /usr/sbin, other callers' may not.
    let program = if Path::new("/usr/sbin/ip").exists() {
        "/usr/sbin/ip"
    } else {
        "ip"
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if batch.is_some() {
        cmd.args(["-batch", "-"]);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| io::Error::other(format!("cannot run ip (install iproute2): {e}")))?;
    if let (Some(text), Some(mut stdin)) = (batch, child.stdin.take()) {
        stdin.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Runs `f` on a thread that joined network namespace `name` (for its /proc/sys/net).
fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let ns = File::open(Path::new("/run/netns").join(name))?;
            setns(ns.as_fd(), CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
            f()
        })
        .join()
        .map_err(|_| io::Error::other("netns thread panicked"))?
    })
}

fn route_localnet(iface: &str) -> io::Result<()> {
    fs::write(
        format!("/proc/sys/net/ipv4/conf/{iface}/route_localnet"),
        "1",
    )
}

/// Removes every network namespace and the host link of `slot` (earlier agents' leftovers).
pub fn clean(slot: u8) -> io::Result<()> {
    let prefix = netns_prefix(slot);
    for entry in fs::read_dir("/run/netns").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) {
            ip(&["netns", "del", &name], None)?;
        }
    }
    if Path::new("/sys/class/net").join(host_link(slot)).exists() {
        ip(&["link", "del", &host_link(slot)], None)?;
    }
    Ok(())
}

/// Builds the fabric of `slot` (after removing any leftovers).
pub fn setup_fabric(slot: u8) -> io::Result<()> {
    clean(slot)?;
    let f = fabric(slot);
    let link = host_link(slot);
    let gw = gateway(slot);
    ip(&["netns", "add", &f], None)?;
    ip(
        &["-n", &f],
        Some("link set lo up\nlink add br0 type bridge\nlink set br0 up\n"),
    )?;
    ip(
        &[
            "link", "add", &link, "type", "veth", "peer", "name", "uplink", "netns", &f,
        ],
        None,
    )?;
    ip(
        &["-n", &f, "link", "set", "uplink", "master", "br0", "up"],
        None,
    )?;
    route_localnet(&link)?;
    let range = format!("127.{}.0.0/16", 2 + slot);
    ip(
        &[],
        Some(&format!(
            "addr add {gw}/32 dev {link}\nlink set {link} up\nroute add {range} dev {link} src {gw} table local\n"
        )),
    )
}

/// Creates pod `uid`'s network namespace with address `pod_ip`; returns the namespace name.
pub fn create_pod(slot: u8, uid: &str, pod_ip: Ipv4Addr) -> io::Result<String> {
    let ns = netns_name(slot, uid);
    let veth = format!(
        "fl{slot}{}",
        uid.replace('-', "").chars().take(11).collect::<String>()
    );
    let f = fabric(slot);
    let _ = ip(&["netns", "del", &ns], None);
    ip(&["netns", "add", &ns], None)?;
    // The MAC derives from the address (as Docker does), so a reused address keeps its MAC
    // and no neighbour cache, the host's or a pod's, points at a deleted pod's interface.
    let mac = mac_of(pod_ip);
    ip(
        &[
            "-n", &f, "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "address",
            &mac, "netns", &ns,
        ],
        None,
    )?;
    ip(
        &["-n", &f, "link", "set", &veth, "master", "br0", "up"],
        None,
    )?;
    in_netns(&ns, || {
        route_localnet("all")?;
        route_localnet("eth0")
    })?;
    let gw = gateway(slot);
    let range = format!("127.{}.0.0/16", 2 + slot);
    ip(
        &["-n", &ns],
        Some(&format!(
            "link set lo up\naddr add {pod_ip}/32 dev eth0\nlink set eth0 up\n\
             route del table local 127.0.0.0/8 dev lo\n\
             route add {range} dev eth0 src {pod_ip}\n\
             route add 127.0.0.0/8 via {gw} dev eth0 src {pod_ip}\n"
        )),
    )?;
    Ok(ns)
}

/// The MAC address of a pod's interface: `02:42` and the four bytes of its address.
pub fn mac_of(ip: Ipv4Addr) -> String {
    let [a, b, c, d] = ip.octets();
    format!("02:42:{a:02x}:{b:02x}:{c:02x}:{d:02x}")
}

/// Removes pod `uid`'s network namespace (its veth pair goes with it).
pub fn delete_pod(slot: u8, uid: &str) -> io::Result<()> {
    let ns = netns_name(slot, uid);
    if Path::new("/run/netns").join(&ns).exists() {
        ip(&["netns", "del", &ns], None)?;
    }
    Ok(())
}

/// Forwards `gateway:443` to the apiserver on `127.0.0.1:api_port`, so pods reach it at the
/// address their `KUBERNETES_SERVICE_HOST` names (TLS passes through untouched).
pub async fn serve_apiserver_proxy(listener: tokio::net::TcpListener, api_port: u16) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", api_port)).await
            {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_handed_out_per_node_and_reused() {
        let mut ipam = Ipam::default();
        let a = ipam.allocate(0, 1).expect("first");
        let b = ipam.allocate(0, 1).expect("second");
        let c = ipam.allocate(0, 2).expect("other node");
        assert_eq!(
            (a, b, c),
            (
                Ipv4Addr::new(127, 2, 1, 2),
                Ipv4Addr::new(127, 2, 1, 3),
                Ipv4Addr::new(127, 2, 2, 2)
            )
        );
        ipam.release(a);
        assert_eq!(
            ipam.allocate(0, 1),
            Some(a),
            "the lowest free address is reused"
        );
        for _ in 0..252 {
            ipam.allocate(3, 0).expect("room for 253 pods");
        }
        assert_eq!(ipam.allocate(3, 0).map(|ip| ip.octets()[3]), Some(254));
        assert_eq!(ipam.allocate(3, 0), None, "full");
        assert_eq!(gateway(3), Ipv4Addr::new(127, 5, 255, 254));
        assert_eq!(pod_cidr(0, 2), "127.2.2.0/24");
        assert_eq!(mac_of(Ipv4Addr::new(127, 2, 1, 17)), "02:42:7f:02:01:11");
    }
}
