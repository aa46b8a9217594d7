//! Writes no client was told landed: a coordinator acknowledges a write only once w - 1
//! fragment nodes besides itself keep its journal record, and a node replaying a record too
//! few nodes could hold drops it (see [`crate::catch_up`]). Without both, a coordinator
//! killed between journaling a write and copying it out uploads it on its return, over
//! every write of the key acknowledged meanwhile (4 nodes, k=2 m=1 w=3).

use bytes::Bytes;

use super::{block_on, Bed, BUCKET};

const KEY: &str = "t/data/u.parquet";

fn v(n: u8) -> Bytes {
    Bytes::from(vec![n; 9000])
}

/// A bed where `v(1)` was written through node 0 and landed at the origin.
async fn landed_v1() -> Bed {
    let bed = Bed::new(4, 2, 1, 3, 11).await;
    bed.put(0, KEY, v(1)).await.unwrap();
    bed.propagate(0).await;
    assert_eq!(bed.origin.body(KEY), Some(v(1)));
    assert_eq!(bed.staged(), 0);
    bed
}

/// Every node reads `want` once the fleet settled, and the origin holds it.
async fn settles_on(bed: &mut Bed, want: Option<Bytes>) {
    bed.heal().await;
    assert_eq!(bed.origin.body(KEY), want, "the origin");
    for i in 0..bed.len() {
        assert_eq!(
            bed.get(i, KEY).await.unwrap(),
            want,
            "a read through node {i}"
        );
    }
}

#[test]
fn a_write_whose_coordinator_died_before_copying_its_record_never_lands_over_a_later_one() {
    block_on(async {
        let mut bed = landed_v1().await;
        // Journaled on node 0's disk, its fragments durable on three nodes; then node 0 dies
        // as it copies the record out: the client never hears back.
        bed.put_dying_at(0, KEY, v(2), "/journal", 0).await;
        bed.put(1, KEY, v(3)).await.unwrap();
        bed.propagate(1).await;
        assert_eq!(bed.origin.body(KEY), Some(v(3)));
        // Node 0 comes back (down longer than the later write took) and catches up.
        bed.start(0).await;
        bed.catch_up(0, false).await;
        assert!(
            bed.node(0).unwrap().staged.get(BUCKET, KEY).is_none(),
            "the write no client was told of is not served"
        );
        settles_on(&mut bed, Some(v(3))).await;
    });
}

#[test]
fn a_write_whose_coordinator_died_before_copying_its_record_never_brings_a_deleted_key_back() {
    block_on(async {
        let mut bed = landed_v1().await;
        bed.put_dying_at(0, KEY, v(2), "/journal", 0).await;
        bed.delete(1, KEY).await.unwrap();
        bed.start(0).await;
        bed.catch_up(0, false).await;
        settles_on(&mut bed, None).await;
    });
}

#[test]
fn a_write_whose_record_reaches_too_few_nodes_is_refused_but_carries_on() {
    block_on(async {
        let mut bed = landed_v1().await;
        bed.put(2, KEY, v(2)).await.unwrap();
        // v3's copies reach the nodes, their answers are lost: they indexed it and retired
        // v2, so v3 is refused (too few confirmed copies) yet stays the key's write.
        bed.registry.drop_path(Some("/journal"), true);
        let refused = bed.put(0, KEY, v(3)).await.unwrap_err();
        assert_eq!(refused.code, floe_core::S3ErrorCode::SlowDown);
        bed.registry.calm();
        for i in 0..bed.len() {
            assert_eq!(bed.get(i, KEY).await.unwrap(), Some(v(3)), "node {i}");
        }
        // Its coordinator dies before propagating it: a copy elsewhere keeps it on return.
        bed.kill(0);
        bed.start(0).await;
        bed.catch_up(0, false).await;
        settles_on(&mut bed, Some(v(3))).await;
    });
}

#[test]
fn a_write_copied_to_its_fragment_nodes_survives_its_coordinator_dying_before_the_answer() {
    block_on(async {
        let mut bed = landed_v1().await;
        // v2 staged; v3's record copied out and indexed, then node 0 dies as it frees v2
        // (the write v3 overtakes) before answering: v3 may have landed, and it stays.
        bed.put(0, KEY, v(2)).await.unwrap();
        let v2 = bed.node(1).unwrap().staged.get(BUCKET, KEY).unwrap().id;
        bed.put_dying_at(0, KEY, v(3), &format!("/obj?id={v2}"), 0)
            .await;
        bed.start(0).await;
        bed.catch_up(0, false).await;
        settles_on(&mut bed, Some(v(3))).await;
    });
}

/// A DELETE through a node the dead coordinator's copy did not reach: the node the copy
/// reached takes the write's propagation over, so the DELETE must find the write there (see
/// [`crate::staged_elsewhere`]) and put it at the origin first, or it lands after it.
#[test]
fn a_write_whose_record_reached_one_node_before_its_coordinator_died_never_lands_over_a_delete() {
    block_on(async {
        let mut bed = landed_v1().await;
        // One copy leaves (to the first fragment node), then node 0 dies.
        bed.put_dying_at(0, KEY, v(2), "/journal", 1).await;
        let holders: Vec<usize> = (1..4)
            .filter(|i| bed.node(*i).unwrap().staged.get(BUCKET, KEY).is_some())
            .collect();
        assert_eq!(holders.len(), 1, "one node indexes the copy");
        let other = (1..4).find(|i| !holders.contains(i)).unwrap();
        bed.delete(other, KEY).await.unwrap();
        settles_on(&mut bed, None).await;
    });
}
