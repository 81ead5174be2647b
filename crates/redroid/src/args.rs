//! The redroid boot arguments of an instance (reference §3.3), shared by the instance Pod and
//! the task controller's data sidecar.
//!
//! Contract: [`androidboot_args`] is pure and returns the exact upstream order — GPU mode,
//! memfd, overlayfs switch (`0` in baseMode), then only what is set: GPU node, screen
//! width/height/dpi/fps, DNS (count then each server), proxy fields, and finally `extraArgs`
//! verbatim (`$(VAR)` is left for the kubelet to expand).

use crate::crd::{NetworkSpec, RedroidInstanceSpec};

/// The `androidboot.*` argument list of `spec`, followed by `spec.extraArgs`.
pub fn androidboot_args(spec: &RedroidInstanceSpec) -> Vec<String> {
    let overlay = if spec.base_mode { "0" } else { "1" };
    let mut args = vec![
        format!("androidboot.redroid_gpu_mode={}", spec.gpu_mode.as_str()),
        "androidboot.use_memfd=1".to_string(),
        format!("androidboot.use_redroid_overlayfs={overlay}"),
    ];
    if let Some(node) = spec.gpu_node.as_deref().filter(|n| !n.is_empty()) {
        args.push(format!("androidboot.redroid_gpu_node={node}"));
    }
    if let Some(screen) = &spec.screen {
        let fields = [
            ("width", screen.width),
            ("height", screen.height),
            ("dpi", screen.dpi),
            ("fps", screen.fps),
        ];
        for (key, value) in fields {
            if let Some(v) = value {
                args.push(format!("androidboot.redroid_{key}={v}"));
            }
        }
    }
    if let Some(network) = &spec.network {
        network_args(network, &mut args);
    }
    args.extend(spec.extra_args.iter().cloned());
    args
}

fn network_args(network: &NetworkSpec, args: &mut Vec<String>) {
    if !network.dns.is_empty() {
        args.push(format!(
            "androidboot.redroid_net_ndns={}",
            network.dns.len()
        ));
        for (i, server) in network.dns.iter().enumerate() {
            args.push(format!("androidboot.redroid_net_dns{}={server}", i + 1));
        }
    }
    let Some(proxy) = &network.proxy else { return };
    let port = (proxy.port > 0).then(|| proxy.port.to_string());
    let fields = [
        ("type", proxy.type_.map(|t| t.as_str().to_string())),
        ("host", proxy.host.clone()),
        ("port", port),
        ("exclude_list", proxy.exclude_list.clone()),
        ("pac", proxy.pac.clone()),
    ];
    for (key, value) in fields {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            args.push(format!("androidboot.redroid_net_proxy_{key}={v}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> RedroidInstanceSpec {
        serde_yaml::from_str(yaml).expect("valid spec")
    }

    #[test]
    fn defaults_give_the_three_base_args() {
        assert_eq!(
            androidboot_args(&spec("index: 0")),
            [
                "androidboot.redroid_gpu_mode=host",
                "androidboot.use_memfd=1",
                "androidboot.use_redroid_overlayfs=1"
            ]
        );
    }

    #[test]
    fn base_mode_turns_overlayfs_off() {
        let args = androidboot_args(&spec("{index: 0, baseMode: true, gpuMode: guest}"));
        assert_eq!(args[0], "androidboot.redroid_gpu_mode=guest");
        assert_eq!(args[2], "androidboot.use_redroid_overlayfs=0");
    }

    #[test]
    fn everything_in_upstream_order_with_extra_args_last() {
        let s = spec(
            r#"
index: 3
gpuNode: /dev/dri/renderD128
screen: {width: 720, height: 1280, dpi: 320, fps: 30}
network:
  dns: [1.1.1.1, 8.8.8.8]
  proxy: {type: static, host: proxy.local, port: 8080, excludeList: "localhost"}
extraArgs: ["androidboot.foo=$(FOO)", "--bar"]
"#,
        );
        assert_eq!(
            androidboot_args(&s)[3..],
            [
                "androidboot.redroid_gpu_node=/dev/dri/renderD128",
                "androidboot.redroid_width=720",
                "androidboot.redroid_height=1280",
                "androidboot.redroid_dpi=320",
                "androidboot.redroid_fps=30",
                "androidboot.redroid_net_ndns=2",
                "androidboot.redroid_net_dns1=1.1.1.1",
                "androidboot.redroid_net_dns2=8.8.8.8",
                "androidboot.redroid_net_proxy_type=static",
                "androidboot.redroid_net_proxy_host=proxy.local",
                "androidboot.redroid_net_proxy_port=8080",
                "androidboot.redroid_net_proxy_exclude_list=localhost",
                "androidboot.foo=$(FOO)",
                "--bar",
            ]
        );
    }

    #[test]
    fn pac_proxy_and_partial_screen() {
        let s = spec(
            "{index: 0, screen: {fps: 60}, network: {proxy: {type: pac, pac: 'http://p/x.pac'}}}",
        );
        assert_eq!(
            androidboot_args(&s)[3..],
            [
                "androidboot.redroid_fps=60",
                "androidboot.redroid_net_proxy_type=pac",
                "androidboot.redroid_net_proxy_port=3128",
                "androidboot.redroid_net_proxy_pac=http://p/x.pac",
            ]
        );
    }
}
