//! Resolution of flags over the file over defaults, the checks, and what `describe` prints.

use super::*;

#[test]
fn flags_override_the_file_which_overrides_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "run:\n  tick: 20s\n  debounce: 1s\n  log_format: json\n  dry_run: true\n").unwrap();
    let flags = RunFlags { config: Some(path.clone()), tick: Some(Duration::from_secs(5)), ..RunFlags::default() };
    let c = RunConfig::resolve(&flags, Some("colocate-system".into())).unwrap();
    assert_eq!(c.run.tick, Duration::from_secs(5), "flag wins over file");
    assert_eq!(c.run.debounce, Duration::from_secs(1), "file wins over default");
    assert_eq!(c.run.log_format, LogFormat::Json);
    assert!(c.run.dry_run, "dry run from the file");
    assert_eq!(c.run.lease_namespace, "colocate-system", "the pod's namespace when nothing else is set");
    assert_eq!(c.run.metrics_addr, SocketAddr::from(([127, 0, 0, 1], 8080)), "default");
    let no_file = RunConfig::resolve(&RunFlags::default(), None).unwrap();
    assert_eq!((no_file.run.tick, no_file.run.debounce), (Duration::from_secs(10), Duration::from_millis(50)));
    assert_eq!(no_file.controller, Config::default());
    assert_eq!(no_file.run.lease_name, "colocate");
}

/// Every flag lands on the `run:` key it is named after, over the file's value.
#[test]
fn every_flag_sets_its_run_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    let ca = PathBuf::from("/c/ca.crt");
    let file = "run:\n  prometheus_tls: {cert_file: /c/tls.crt, key_file: /c/tls.key}\n  lease_namespace: from-file\n";
    std::fs::write(&path, file).unwrap();
    let flags = RunFlags {
        config: Some(path.clone()),
        dry_run: true,
        metrics_addr: Some(SocketAddr::from(([10, 0, 0, 1], 9000))),
        log_format: Some(LogFormat::Json),
        tick: Some(Duration::from_millis(1500)),
        debounce: Some(Duration::from_millis(20)),
        lease_namespace: Some("from-flag".into()),
        lease_name: Some("lease".into()),
        prometheus_url: Some("http://p:9090".into()),
        prometheus_ca_file: Some(ca.clone()),
        prometheus_token_file: Some("/t/p".into()),
        master_token_file: Some("/t/m".into()),
        master_ca_file: Some(ca.clone()),
        lease_duration: Some(Duration::from_secs(20)),
        status_interval: Some(Duration::from_secs(7)),
        adapters: true,
        master_timeout: Some(Duration::from_secs(2)),
        job_namespaces: vec!["ml".into()],
    };
    let expected = RunSettings {
        dry_run: true,
        metrics_addr: SocketAddr::from(([10, 0, 0, 1], 9000)),
        log_format: LogFormat::Json,
        tick: Duration::from_millis(1500),
        debounce: Duration::from_millis(20),
        lease_namespace: "from-flag".into(),
        lease_name: "lease".into(),
        prometheus_url: Some("http://p:9090".into()),
        // The flag's CA file; the file's client certificate stays.
        prometheus_tls: TlsFiles {
            ca_file: Some(ca.clone()),
            cert_file: Some("/c/tls.crt".into()),
            key_file: Some("/c/tls.key".into()),
        },
        prometheus_token_file: Some("/t/p".into()),
        master_token_file: Some("/t/m".into()),
        master_tls: TlsFiles { ca_file: Some(ca.clone()), ..TlsFiles::default() },
        lease_duration: Duration::from_secs(20),
        status_interval: Duration::from_secs(7),
        adapters: true,
        master_timeout: Duration::from_secs(2),
        job_namespaces: vec!["ml".into()],
        ..RunSettings::default()
    };
    let file = yaml::parse::<RunConfig>(&path, &std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(flags.over(&file.run).unwrap(), expected);
    // No flag given: the file's settings as they are.
    let none = RunFlags { config: Some(path.clone()), ..RunFlags::default() };
    assert_eq!(none.over(&file.run).unwrap(), file.run);
}

#[test]
fn the_pods_namespace_is_under_the_files_lease_namespace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "run:\n  lease_namespace: default\n").unwrap();
    let flags = RunFlags { config: Some(path.clone()), ..RunFlags::default() };
    let c = RunConfig::resolve(&flags, Some("colocate-system".into())).unwrap();
    assert_eq!(c.run.lease_namespace, "default", "named in the file, even as the default");
    let c = RunConfig::resolve(&RunFlags::default(), Some("colocate-system".into())).unwrap();
    assert_eq!(c.run.lease_namespace, "colocate-system");
    assert_eq!(RunConfig::resolve(&RunFlags::default(), None).unwrap().run.lease_namespace, "default");
}

/// A key with no value (null) is unset, as if left out; a duration's null is refused.
#[test]
fn null_is_unset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    let keys = ["dry_run", "metrics_addr", "log_format", "lease_namespace", "lease_name", "prometheus_url"];
    let more = ["prometheus_tls", "prometheus_token_file", "master_token_file", "master_tls", "adapters"];
    let nulls: String = keys.iter().chain(&more).chain(&["job_namespaces"]).map(|k| format!("  {k}:\n")).collect();
    std::fs::write(&path, format!("run:\n{nulls}")).unwrap();
    let flags = RunFlags { config: Some(path.clone()), ..RunFlags::default() };
    let c = RunConfig::resolve(&flags, Some("colocate-system".into())).unwrap();
    let expected = RunSettings { lease_namespace: "colocate-system".into(), ..RunSettings::default() };
    assert_eq!(c.run, expected);
    let e = refusal("run:\n  tick: ~\n");
    assert!(e.contains("run.tick: "), "{e}");
}

#[test]
fn describe_prints_every_setting_of_both_blocks() {
    let text = RunConfig::default().describe();
    for line in [
        "controller:",
        "  target_utilization: 0.9",
        "  safety_margin: 0",
        "  grow_max_step: 32",
        "  waiting_reservation_after: 30m",
        "  completion_time_split: true",
        "run:",
        "  metrics_addr: 127.0.0.1:8080",
        "  log_format: text",
        "  debounce: 50ms",
        "  sample_stale_after: 1m",
        "  prometheus_url: (none)",
        "  prometheus_tls: system roots",
        "  job_namespaces: (all)",
        "services: 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }
    let settings = |block: &Value| block.as_mapping().unwrap().len();
    let printed = text.lines().filter(|l| l.starts_with("  ")).count();
    let controller = serde_norway::to_value(Config::default()).unwrap();
    let run = serde_norway::to_value(RunSettings::default()).unwrap();
    assert_eq!(printed, settings(&controller) + settings(&run), "{text}");
    let tls = RunSettings {
        master_tls: TlsFiles { ca_file: Some("/ca".into()), cert_file: Some("/crt".into()), key_file: None },
        job_namespaces: vec!["a".into(), "b".into()],
        ..RunSettings::default()
    };
    let text = RunConfig { run: tls, ..RunConfig::default() }.describe();
    assert!(text.contains("\n  master_tls: CA /ca, client certificate /crt\n"), "{text}");
    assert!(text.contains("\n  job_namespaces: a, b\n"), "{text}");
}

#[test]
fn lease_name_must_be_an_object_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "run:\n  lease_name: team-a.colocate\n").unwrap();
    let flags = RunFlags { config: Some(path.clone()), ..RunFlags::default() };
    assert_eq!(RunConfig::resolve(&flags, None).unwrap().run.lease_name, "team-a.colocate");
    for bad in ["Colocate", "-colocate", "colocate_1", ""] {
        let flags = RunFlags { lease_name: Some(bad.into()), ..flags.clone() };
        let e = RunConfig::resolve(&flags, None).unwrap_err().to_string();
        assert!(e.contains("run.lease_name") && e.contains("not a valid object name"), "{bad}: {e}");
    }
}

#[test]
fn job_namespaces_come_from_the_file_or_the_flag_and_must_be_namespace_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "run:\n  job_namespaces: [ml, research]\n").unwrap();
    let flags = RunFlags { config: Some(path.clone()), ..RunFlags::default() };
    assert_eq!(RunConfig::resolve(&flags, None).unwrap().run.job_namespaces, ["ml", "research"]);
    let flagged = RunFlags { job_namespaces: vec!["batch".into()], ..flags.clone() };
    assert_eq!(RunConfig::resolve(&flagged, None).unwrap().run.job_namespaces, ["batch"]);
    assert!(RunConfig::resolve(&RunFlags::default(), None).unwrap().run.job_namespaces.is_empty(), "every namespace");
    for bad in ["ML", "a.b", ""] {
        let flags = RunFlags { job_namespaces: vec!["ml".into(), bad.into()], ..flags.clone() };
        let e = RunConfig::resolve(&flags, None).unwrap_err().to_string();
        assert!(e.contains("run.job_namespaces[1]") && e.contains("not a namespace name"), "{bad}: {e}");
    }
}

/// The error `check-config` gives for a file holding `yaml`.
fn refusal(yaml: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, yaml).unwrap();
    check_file(&path).expect_err(yaml).to_string()
}

/// What the sampler would refuse at start is refused when the file is checked, naming the key.
#[test]
fn sources_the_sampler_cannot_use_are_refused_by_the_check() {
    let service =
        |source: &str| format!("services:\n  - name: a\n    namespace: web\n    hpa: a\n    load: {source}\n");
    for (source, expected) in [
        (
            "{scrape: {url: 'https://:9100/metrics', metric: x}}",
            "services[0].load.scrape.url: `https://:9100/metrics`: empty host",
        ),
        (
            "{scrape: {url: 'ftp://a/metrics', metric: x}}",
            "services[0].load.scrape.url: `ftp://a/metrics`: scheme `ftp` is not http or https",
        ),
        (
            "{scrape: {url: 'a:9100/metrics', metric: x}}",
            "services[0].load.scrape.url: `a:9100/metrics`: scheme `a` is not http",
        ),
        (
            "{scrape: {url: '/metrics', metric: x}}",
            "services[0].load.scrape.url: `/metrics`: relative URL without a base",
        ),
        (
            "{scrape: {url: 'http://a:99999/', metric: x}}",
            "services[0].load.scrape.url: `http://a:99999/`: invalid port number",
        ),
        (
            "{scrape: {url: 'http://a/metrics', metric: nginx-requests}}",
            "services[0].load.scrape.metric: `nginx-requests` is not a Prometheus metric name",
        ),
        (
            "{scrape: {url: 'http://a/metrics', metric: ''}}",
            "services[0].load.scrape.metric: `` is not a Prometheus metric name",
        ),
    ] {
        let e = refusal(&service(source));
        assert!(e.contains(expected), "{source}: expected `{expected}` in: {e}");
    }
    let good = refusal(&format!(
        "{}  - {{name: b}}\n",
        service("{scrape: {url: 'http://10.0.0.1:9113/metrics', metric: 'job:rate:5m'}}")
    ));
    assert!(good.contains("services[1]: missing field `namespace`"), "only the second service is wrong: {good}");
}

#[test]
fn prometheus_url_must_be_http_or_https_with_a_host() {
    for (url, problem) in [
        ("ftp://prometheus:9090", "scheme `ftp` is not http or https"),
        ("prometheus:9090", "scheme `prometheus` is not http or https"),
        ("http://", "empty host"),
        ("", "relative URL without a base"),
    ] {
        let e = refusal(&format!("run:\n  prometheus_url: '{url}'\n"));
        assert!(e.contains(&format!(":2: run.prometheus_url: `{url}`: {problem}")), "{url}: {e}");
        let flags = RunFlags { prometheus_url: Some(url.into()), ..RunFlags::default() };
        let e = RunConfig::resolve(&flags, None).unwrap_err().to_string();
        assert!(e.contains(&format!("run.prometheus_url: `{url}`: {problem}")), "--prometheus-url {url}: {e}");
    }
    let flags = RunFlags { prometheus_url: Some("http://[::1]:9090/prom/".into()), ..RunFlags::default() };
    assert!(RunConfig::resolve(&flags, None).is_ok());
}

#[test]
fn a_promql_source_without_prometheus_is_named_by_its_key() {
    let yaml = "services:\n  - {name: a, namespace: web, hpa: a, slo_p99: 1s, latency_p99: {promql: up}}\n";
    let e = refusal(yaml);
    assert!(e.contains("services[0].latency_p99: a promql source needs run.prometheus_url"), "{e}");
}

#[test]
fn lease_duration_fits_the_lease_object() {
    let e = refusal("run:\n  lease_duration: 70years\n");
    assert!(e.contains("run.lease_duration: must be shorter than 2147483647s"), "{e}");
    let e = refusal("run:\n  lease_duration: 2s\n");
    assert!(e.contains("run.lease_duration: must be at least 3s"), "{e}");
}

#[test]
fn usage_mode_needs_prometheus_and_non_empty_usage_queries() {
    let e = refusal("controller:\n  capacity: usage\n");
    assert!(e.contains("controller.capacity: usage reads pods' CPU and memory usage from Prometheus"), "{e}");
    let e = refusal(
        "controller:\n  capacity: usage\nrun:\n  prometheus_url: http://prom:9090\n  usage_memory_query: ' '\n",
    );
    assert!(e.contains("run.usage_memory_query: the query is empty"), "{e}");
    // Requests mode reads no usage: neither is needed there.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, "run:\n  usage_cpu_query: ''\n").unwrap();
    let config = check_file(&path).unwrap();
    assert_eq!(config.run.usage_memory_query, crate::live::sampler::usage::DEFAULT_MEMORY_QUERY);
}
