//! The durability property over random fault schedules, and the faults as named
//! schedules. For any schedule: no read returns a version older than the last
//! acknowledgment it follows, and after healing every key's last acknowledged write (or
//! delete) is what the origin holds. A request that failed may or may not have taken effect
//! (as with S3): its version joins the ones allowed until the next acknowledgment.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use proptest::prelude::*;

use super::{block_on, Bed};

const NODES: usize = 4;
const KEYS: [&str; 3] = ["t/data/a.parquet", "t/metadata/v.json", "t/c"];

/// One step of a schedule.
#[derive(Debug, Clone)]
enum Op {
    Put { node: usize, key: usize, len: usize },
    Delete { node: usize, key: usize },
    Get { node: usize, key: usize },
    Kill(usize),
    Start(usize),
    CatchUp(usize),
    Propagate(usize),
    Repair(usize),
    Cut(bool),
    LoseOriginAnswer,
    Drops { before: u32, after: u32 },
    CrashAtNextCall { node: usize, after_serving: bool },
    Pause(usize),
    Resume(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let n = 0..NODES;
    let k = 0..KEYS.len();
    prop_oneof![
        6 => (n.clone(), k.clone(), prop_oneof![Just(0usize), 1..5000usize, 5000..20000usize])
            .prop_map(|(node, key, len)| Op::Put { node, key, len }),
        3 => (n.clone(), k.clone()).prop_map(|(node, key)| Op::Delete { node, key }),
        6 => (n.clone(), k).prop_map(|(node, key)| Op::Get { node, key }),
        1 => n.clone().prop_map(Op::Kill),
        2 => n.clone().prop_map(Op::Start),
        2 => n.clone().prop_map(Op::CatchUp),
        3 => n.clone().prop_map(Op::Propagate),
        1 => n.clone().prop_map(Op::Repair),
        2 => any::<bool>().prop_map(Op::Cut),
        1 => Just(Op::LoseOriginAnswer),
        1 => (n.clone(), any::<bool>()).prop_map(|(node, after_serving)| Op::CrashAtNextCall { node, after_serving }),
        1 => n.clone().prop_map(Op::Pause),
        2 => n.clone().prop_map(Op::Resume),
        1 => (prop_oneof![Just(0u32), Just(50), Just(200)], prop_oneof![Just(0u32), Just(50), Just(200)])
            .prop_map(|(before, after)| Op::Drops { before, after }),
    ]
}

/// What each key may hold: the last acknowledged version, and any tried since that failed.
#[derive(Default)]
struct Model(HashMap<&'static str, Vec<Option<Bytes>>>);

impl Model {
    fn allowed(&self, key: &'static str) -> &[Option<Bytes>] {
        self.0.get(key).map_or(&[None], |v| v.as_slice())
    }

    fn outcome(&mut self, key: &'static str, version: Option<Bytes>, acked: bool) {
        let v = self.0.entry(key).or_insert_with(|| vec![None]);
        if acked {
            *v = vec![version];
        } else {
            v.push(version);
        }
    }
}

fn body(key: &str, step: usize, len: usize) -> Bytes {
    let tag = format!("{key}@{step};");
    Bytes::from(
        tag.as_bytes()
            .iter()
            .copied()
            .cycle()
            .take(len.max(tag.len()))
            .collect::<Vec<u8>>(),
    )
}

fn show(v: &Option<Bytes>) -> String {
    v.as_ref().map_or("<none>".into(), |b| {
        String::from_utf8_lossy(&b[..b.len().min(32)]).into_owned()
    })
}

/// Runs `ops` on a fresh bed; `Err` names the first broken promise.
async fn run(ops: &[Op], seed: u64) -> Result<(), String> {
    // FLOE_TESTBED_LOG=info shows what the nodes did (for a failing case).
    if let Ok(filter) = std::env::var("FLOE_TESTBED_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
    let mut bed = Bed::new(NODES, 2, 1, 3, seed).await;
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        tracing::info!(step, ?op, "testbed");
        match *op {
            Op::Put { node, key, len } => {
                let (key, b) = (KEYS[key], body(KEYS[key], step, len));
                let acked = bed.put(node, key, b.clone()).await.is_ok();
                model.outcome(key, Some(b), acked);
            }
            Op::Delete { node, key } => {
                let acked = bed.delete(node, KEYS[key]).await.is_ok();
                model.outcome(KEYS[key], None, acked);
            }
            Op::Get { node, key } => {
                if let Ok(got) = bed.get(node, KEYS[key]).await {
                    let allowed = model.allowed(KEYS[key]);
                    if !allowed.contains(&got) {
                        let allowed: Vec<String> = allowed.iter().map(show).collect();
                        return Err(format!(
                            "step {step}: {op:?} read {} but only {allowed:?} may be read",
                            show(&got)
                        ));
                    }
                }
            }
            Op::Kill(i) => bed.kill(i),
            Op::Start(i) => bed.start(i).await,
            Op::CatchUp(i) => bed.catch_up(i, false).await,
            Op::Propagate(i) => bed.propagate(i).await,
            Op::Repair(i) => drop(bed.repair(i).await),
            Op::Cut(cut) => bed.origin.cut.store(cut, Ordering::SeqCst),
            Op::LoseOriginAnswer => {
                bed.origin.lose_answers.fetch_add(1, Ordering::SeqCst);
            }
            Op::Drops { before, after } => bed.registry.set_faults(before, after),
            Op::Pause(i) => bed.pause(i),
            Op::Resume(i) => bed.resume(i),
            Op::CrashAtNextCall {
                node,
                after_serving,
            } => bed
                .registry
                .crash_at_next_call(&format!("n{node}"), after_serving),
        }
    }
    bed.heal().await;
    for key in KEYS {
        let held = bed.origin.body(key);
        let allowed = model.allowed(key);
        if !allowed.contains(&held) {
            let allowed: Vec<String> = allowed.iter().map(show).collect();
            return Err(format!(
                "after healing the origin holds {} for {key}, not one of {allowed:?}",
                show(&held)
            ));
        }
        for i in 0..bed.len() {
            let got = bed
                .get(i, key)
                .await
                .map_err(|e| format!("healed node {i}: {e}"))?;
            if got != held {
                return Err(format!(
                    "after healing node {i} reads {} for {key}, the origin {}",
                    show(&got),
                    show(&held)
                ));
            }
        }
    }
    Ok(())
}

proptest! {
    // PROPTEST_CASES=N runs more schedules.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_acknowledged_write_or_delete_is_lost_and_no_read_goes_back(
        ops in proptest::collection::vec(op(), 1..60),
        seed in any::<u64>(),
    ) {
        let outcome = block_on(run(&ops, seed));
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}
