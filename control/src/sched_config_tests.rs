//! The scheduler's section as part of a whole floe-control config: the shipped config loads,
//! `worker_env` and the catalog reach each deployment, broken values name their key.

use floe_core::config::ConfigError;
use floe_sched::config::Trigger;
use floe_sched::cron::Catchup;

fn parse(text: &str) -> Result<crate::config::Settings, ConfigError> {
    crate::config::parse("f.yaml", text, &|v| (v == "SET").then(|| "s".to_owned()))
}

#[test]
fn worker_env_reaches_each_deployment_under_its_own_env_and_the_catalog_is_named() {
    let s = parse(
        "catalog: {uri: 'http://cat:8181'}\nnodes: [{admin: 'http://n:9101', token: t}]\nscheduler: {store: 'sqlite://x', run_log_dir: /spool, \
         worker_env: {A: shared, B: shared}, \
         deployments: [{name: d, code: {command: c}, env: {B: own}}]}",
    )
    .unwrap();
    let env = &s.scheduler.unwrap().deployments[0].env;
    assert_eq!(env["A"], "shared");
    assert_eq!(env["B"], "own");
    assert_eq!(env["FLOE_RUN_LOG_DIR"], "/spool");
    assert_eq!(env["FLOE_CATALOG_URI"], "http://cat:8181");
}

#[test]
fn the_shipped_scheduler_config_loads() {
    let s = parse(include_str!("../../conf/scheduler.yaml")).unwrap();
    let sc = s.scheduler.unwrap();
    assert!(!s.follows_catalog);
    assert_eq!(sc.deployments.len(), 3);
    assert_eq!(sc.deployments[0].max_attempts, 3);
    // The shared worker environment reaches every deployment; its own env wins.
    for d in &sc.deployments {
        assert!(
            d.env["FLOE_S3_ENDPOINT"].starts_with("http://"),
            "{}",
            d.name
        );
        assert!(d.env["FLOE_RUN_LOG_DIR"].ends_with(".floe-control/run-log"));
    }
    assert_eq!(sc.deployments[0].env["LOG_LEVEL"], "info");
    assert!(
        matches!(&sc.deployments[0].triggers[0], Trigger::Cron(c) if c.catchup == Catchup::Sequential)
    );
}

#[test]
fn a_wrong_key_is_named() {
    let e = parse(include_str!(
        "../../conf/testdata/control-sched-wrongkey.yaml"
    ))
    .unwrap_err();
    assert_eq!(e.file, "f.yaml");
    assert!(e.reason.contains("trigger"), "{e}");
}

#[test]
fn bad_values_name_their_key() {
    let d = |extra: &str| {
        format!("scheduler: {{deployments: [{{name: a, code: {{command: x}}{extra}}}]}}")
    };
    let cases = [
        (d(", kind: container"), "scheduler.deployments[0].kind"),
        (d(", triggers: [{cron: {schedule: '* * *'}}]"), "scheduler.deployments[0].triggers[0].cron"),
        (d(", triggers: [{cron: {schedule: '* * * * *', timezone: Nowhere}}]"), "scheduler.deployments[0].triggers[0].cron"),
        (d(", triggers: [{webhook: {path: 'a/b'}}]"), "scheduler.deployments[0].triggers[0].webhook.path"),
        (d(", triggers: [{webhook: {path: a, secret_env: UNSET}}]"), "scheduler.deployments[0].triggers[0].webhook.secret_env"),
        (d(", triggers: [{webhook: {path: a, methods: [post]}}]"), "scheduler.deployments[0].triggers[0].webhook.methods"),
        (d(", triggers: [{webhook: {path: a, methods: []}}]"), "scheduler.deployments[0].triggers[0].webhook.methods"),
        (d(", triggers: [{webhook: {path: a, tolerance_secs: 0}}]"), "scheduler.deployments[0].triggers[0].webhook.tolerance_secs"),
        (d(", time_limit_secs: 0"), "scheduler.deployments[0].time_limit_secs"),
        ("scheduler: {deployments: [{name: 'a b', code: {command: x}}]}".into(), "scheduler.deployments[0].name"),
        ("scheduler: {store: 'mysql://x'}".into(), "scheduler.store"),
        ("scheduler: {store: 'sqlite://x', store_env: SET}".into(), "scheduler"),
        ("scheduler: {lease_ms: 1}".into(), "scheduler.lease_ms"),
        ("status_address: 127.0.0.1:1".into(), "catalog"),
        (
            "scheduler: {deployments: [{name: a, code: {command: x}}, {name: a, code: {command: y}}]}".into(),
            "scheduler.deployments[1].name",
        ),
    ];
    for (text, key) in cases {
        assert_eq!(parse(&text).unwrap_err().key, key, "{text}");
    }
    let env = |v: &str| (v == "PG").then(|| "postgres://u@h/db".to_owned());
    let ok = crate::config::parse("f.yaml", "scheduler: {store_env: PG}", &env).unwrap();
    assert_eq!(ok.scheduler.unwrap().store, "postgres://u@h/db");
}
