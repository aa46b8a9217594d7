//! Forget messages and how members are told: the wire form, a call that fails at once is sent
//! again within the wait, a silent member is given up on at the wait, and a member that
//! missed the first round is not waited for in the second.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use floe_core::fleet::{Membership, Peer, PeerError, PeerReply, Placement, Transport};

use super::*;

/// Members answering as scripted: `fails` calls refused at once first, `silent` never answer.
struct Scripted {
    me: Arc<str>,
    peers: Vec<PeerRef>,
    fails: Mutex<HashMap<String, u32>>,
    silent: Vec<String>,
    calls: Mutex<Vec<String>>,
}

impl Scripted {
    fn new(ids: &[&str], fails: &[(&str, u32)], silent: &[&str]) -> Arc<Self> {
        Arc::new(Self {
            me: Arc::from("me"),
            peers: ids
                .iter()
                .map(|id| {
                    Arc::new(Peer {
                        id: Arc::from(*id),
                        addr: Arc::from(format!("mem://{id}").as_str()),
                    })
                })
                .collect(),
            fails: Mutex::new(fails.iter().map(|(id, n)| (id.to_string(), *n)).collect()),
            silent: silent.iter().map(|s| s.to_string()).collect(),
            calls: Mutex::new(Vec::new()),
        })
    }

    fn calls_to(&self, id: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| *c == id)
            .count()
    }
}

impl Membership for Scripted {
    fn node_id(&self) -> &Arc<str> {
        &self.me
    }
    fn others(&self) -> Vec<PeerRef> {
        self.peers.clone()
    }
}

impl Placement for Scripted {
    fn owner(&self, _: &str, _: &str, _: u64) -> Option<PeerRef> {
        None
    }
}

#[async_trait]
impl Transport for Scripted {
    async fn call(
        &self,
        peer: &PeerRef,
        _service: &str,
        call: PeerCall,
        wait: Duration,
    ) -> Result<PeerReply, PeerError> {
        assert!(Forget::decode(&call).is_ok());
        self.calls.lock().unwrap().push(peer.id.to_string());
        if self.silent.iter().any(|s| **s == *peer.id) {
            tokio::time::sleep(wait).await;
            return Err(PeerError::Unavailable("silent".into()));
        }
        if let Some(n) = self.fails.lock().unwrap().get_mut(&*peer.id) {
            if *n > 0 {
                *n -= 1;
                return Err(PeerError::Unavailable("connection closed".into()));
            }
        }
        Ok(PeerReply {
            status: 204,
            body: bytes::Bytes::new(),
        })
    }
}

fn peer(fleet: &Scripted, id: &str) -> PeerRef {
    fleet.peers.iter().find(|p| &*p.id == id).cloned().unwrap()
}

#[tokio::test]
async fn a_call_that_fails_at_once_is_sent_again_within_the_wait() {
    let scripted = Scripted::new(&["a"], &[("a", 3)], &[]);
    let fleet: Arc<dyn Fleet> = scripted.clone();
    let call = Forget::keys("lake", vec!["k".into()]).call();
    let a = peer(&scripted, "a");
    assert!(tell_one(&fleet, &a, call, Duration::from_secs(5)).await);
    assert_eq!(
        scripted.calls_to("a"),
        4,
        "three refusals, then the confirmation"
    );
}

#[tokio::test]
async fn a_silent_member_is_given_up_on_at_the_wait() {
    let scripted = Scripted::new(&["a"], &[], &["a"]);
    let fleet: Arc<dyn Fleet> = scripted.clone();
    let call = Forget::keys("lake", vec!["k".into()]).call();
    let a = peer(&scripted, "a");
    let started = std::time::Instant::now();
    assert!(!tell_one(&fleet, &a, call, Duration::from_millis(100)).await);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        scripted.calls_to("a"),
        1,
        "one call, waited for the whole wait"
    );
}

#[tokio::test]
async fn a_member_that_missed_the_first_round_is_not_waited_for_again() {
    let scripted = Scripted::new(&["a", "b", "c"], &[], &[]);
    let fleet: Arc<dyn Fleet> = scripted.clone();
    let forget = Forget::keys("lake", vec!["k".into()]);
    let recent = RecentMembers::default();
    let missed = tell_fleet(&fleet, &recent, &forget, &[Arc::from("b")]).await;
    assert!(missed.is_empty());
    let asked: Vec<usize> = ["a", "b", "c"]
        .iter()
        .map(|id| scripted.calls_to(id))
        .collect();
    assert_eq!(asked, vec![1, 0, 1]);
}

#[test]
fn a_forget_round_trips_and_junk_is_refused() {
    let f = Forget::keys("lake", vec!["t/data/a.parquet".into(), "a//b".into()]);
    assert_eq!(Forget::decode(&f.call()), Ok(f.clone()));
    // A forget of keys reads as an earlier release wrote it.
    assert!(!String::from_utf8_lossy(&f.call().body).contains("every"));
    let every = Forget {
        every: true,
        ..Forget::keys("lake", Vec::new())
    };
    assert_eq!(Forget::decode(&every.call()), Ok(every));
    let mut bad = Forget::keys("b", Vec::new()).call();
    bad.body = bytes::Bytes::from_static(b"{\"bucket\":\"b\",\"keys\":[],\"x\":1}");
    assert!(Forget::decode(&bad).is_err());
    bad.path = "/other".into();
    assert!(Forget::decode(&bad).is_err());
}
