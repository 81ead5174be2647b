//! The fault-injecting proxy against the real API server: a client pointed at it works as if
//! talking to the API server when no faults are set, and sees each kind of fault as the API
//! server would deliver it when they are, including a write that was applied although the
//! client got an error.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use testenv::chaos::{FaultProxy, Plan, Rates};
use testenv::{TestNamespace, client, service_account_token};

async fn proxied_client(proxy: &FaultProxy, ns: &str) -> kube::Client {
    let admin = client().await;
    // A ServiceAccount that may do everything in the namespace (the proxy passes tokens on).
    let rb: k8s_openapi::api::rbac::v1::RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "default-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]
    }))
    .expect("rolebinding");
    Api::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &rb)
        .await
        .expect("bind admin");
    let token = testenv::eventually(
        "the default ServiceAccount",
        Duration::from_secs(30),
        || {
            let admin = admin.clone();
            async move { service_account_token(&admin, ns, "default").await.ok() }
        },
    )
    .await
    .expect("token");
    let dir = std::env::temp_dir().join(format!("chaos-proxy-{ns}"));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("kubeconfig");
    proxy.kubeconfig(&path, &token, ns).expect("kubeconfig");
    let kc = Kubeconfig::read_from(&path).expect("read kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    // kube retries 429/503 up to 15 times (minutes at a 100% fault rate); this test looks at
    // what one request gets.
    config.default_retry = false;
    kube::Client::try_from(config).expect("client")
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": {"k": "v"}}))
        .expect("configmap")
}

#[tokio::test]
async fn without_faults_the_proxy_is_transparent_and_watches_stream() {
    let admin = client().await;
    let ns = TestNamespace::new(&admin, "chaos-clean").await;
    let proxy = FaultProxy::start(Plan {
        seed: 1,
        rates: Rates::none(),
    })
    .await
    .expect("proxy");
    let c = proxied_client(&proxy, &ns.name).await;
    let api: Api<ConfigMap> = Api::namespaced(c, &ns.name);
    let rv = api
        .list(&Default::default())
        .await
        .expect("list")
        .metadata
        .resource_version;
    api.create(&PostParams::default(), &cm("a"))
        .await
        .expect("create through the proxy");
    let mut events = api
        .watch(&WatchParams::default(), &rv.unwrap_or_default())
        .await
        .expect("watch")
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), events.try_next())
        .await
        .expect("an event within 10 s")
        .expect("watch stream");
    assert!(matches!(first, Some(WatchEvent::Added(c)) if c.metadata.name.as_deref() == Some("a")));
    assert!(proxy.log().is_empty(), "no faults were injected");
    assert!(proxy.requests() >= 3);
}

#[tokio::test]
async fn each_fault_reaches_the_client_as_the_api_server_would_deliver_it() {
    let admin = client().await;
    let ns = TestNamespace::new(&admin, "chaos-faults").await;
    let admin_cms: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns.name);
    let only = |f: fn(&mut Rates)| {
        let mut r = Rates::none();
        f(&mut r);
        r
    };
    let proxy = FaultProxy::start(Plan {
        seed: 5,
        rates: Rates::none(),
    })
    .await
    .expect("proxy");
    let c = proxied_client(&proxy, &ns.name).await;
    let api: Api<ConfigMap> = Api::namespaced(c, &ns.name);

    proxy.set_rates(only(|r| r.conflict = 1.0));
    let e = api
        .create(&PostParams::default(), &cm("x"))
        .await
        .expect_err("409");
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 409), "{e:?}");

    proxy.set_rates(only(|r| r.throttle = 1.0));
    let e = api.get("x").await.expect_err("429");
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 429), "{e:?}");

    proxy.set_rates(only(|r| r.unavailable = 1.0));
    let e = api.get("x").await.expect_err("503");
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 503), "{e:?}");

    proxy.set_rates(only(|r| r.reset_before = 1.0));
    assert!(
        api.create(&PostParams::default(), &cm("before"))
            .await
            .is_err()
    );
    assert!(
        admin_cms.get_opt("before").await.expect("get").is_none(),
        "never applied"
    );

    proxy.set_rates(only(|r| r.reset_after = 1.0));
    assert!(
        api.create(&PostParams::default(), &cm("after"))
            .await
            .is_err(),
        "the client sees an error"
    );
    assert!(
        admin_cms.get_opt("after").await.expect("get").is_some(),
        "but the write happened"
    );

    proxy.set_rates(only(|r| r.watch_gone = 1.0));
    let rv = admin_cms
        .list(&Default::default())
        .await
        .expect("list")
        .metadata
        .resource_version;
    let mut events = api
        .watch(&WatchParams::default(), &rv.unwrap_or_default())
        .await
        .expect("watch")
        .boxed();
    let ev = events.try_next().await.expect("stream").expect("an event");
    assert!(
        matches!(ev, WatchEvent::Error(s) if s.code == 410),
        "410 Gone"
    );

    proxy.set_rates(only(|r| {
        r.watch_cut = 1.0;
        r.max_watch_life = Duration::from_millis(300);
    }));
    let started = std::time::Instant::now();
    let events = api
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch");
    let ended = tokio::time::timeout(Duration::from_secs(10), events.collect::<Vec<_>>()).await;
    assert!(ended.is_ok(), "the watch was cut");
    assert!(started.elapsed() < Duration::from_secs(10));

    let counts = proxy.counts();
    for kind in [
        "conflict_409",
        "throttle_429",
        "unavailable_503",
        "reset_before_write",
        "reset_after_write",
        "watch_gone_410",
        "watch_cut",
    ] {
        assert!(
            counts.get(kind).copied().unwrap_or(0) >= 1,
            "{kind}: {counts:?}"
        );
    }
    assert!(
        proxy.log().iter().all(|r| !r.request.is_empty()),
        "every fault names its request"
    );
}
