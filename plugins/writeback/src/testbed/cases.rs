//! The faults, each as a fixed schedule on the test bed (4 nodes, k=2 m=1 w=3).

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{block_on, Bed, BUCKET};

const KEY: &str = "t/data/a.parquet";

fn v(n: u8) -> Bytes {
    Bytes::from(vec![n; 9000])
}

async fn bed() -> Bed {
    Bed::new(4, 2, 1, 3, 7).await
}

#[test]
fn a_failed_delete_leaves_the_acknowledged_write() {
    block_on(async {
        let mut bed = bed().await;
        bed.origin.cut.store(true, Ordering::SeqCst);
        bed.put(0, KEY, v(1)).await.unwrap();
        assert!(
            bed.delete(1, KEY).await.is_err(),
            "the staged write cannot land first"
        );
        bed.heal().await;
        assert_eq!(bed.origin.body(KEY), Some(v(1)));
    });
}

#[test]
fn a_refused_overwrite_leaves_the_acknowledged_write() {
    block_on(async {
        let mut bed = bed().await;
        bed.origin.cut.store(true, Ordering::SeqCst);
        bed.put(0, KEY, v(1)).await.unwrap();
        // Two nodes left: fewer than w, so the overwrite goes to the origin, which is cut.
        bed.kill(2);
        bed.kill(3);
        assert!(bed.put(1, KEY, v(2)).await.is_err());
        // Still the key's write (its fragments may be out of reach: a read is 503, never v0).
        assert!(bed.node(0).unwrap().staged.get(BUCKET, KEY).is_some());
        bed.heal().await;
        assert_eq!(bed.origin.body(KEY), Some(v(1)));
    });
}

#[test]
fn a_delete_acknowledged_while_a_holder_was_down_stays_deleted() {
    block_on(async {
        let mut bed = bed().await;
        bed.put(0, KEY, v(1)).await.unwrap();
        let r = bed.node(0).unwrap().staged.get(BUCKET, KEY).unwrap();
        let holder = r.placements.iter().find(|p| p.node != "n0").unwrap();
        let away: usize = holder.node[1..].parse().unwrap();
        bed.kill(away);
        bed.delete(0, KEY).await.unwrap();
        bed.start(away).await;
        assert!(
            bed.get(away, KEY).await.is_err(),
            "not served before it caught up"
        );
        bed.catch_up(away, false).await;
        assert_eq!(bed.get(away, KEY).await.unwrap(), None);
        bed.heal().await;
        assert_eq!(bed.origin.body(KEY), None);
    });
}

#[test]
fn a_restarted_node_serves_the_write_acknowledged_while_it_was_down() {
    block_on(async {
        let mut bed = bed().await;
        bed.origin.store(KEY, v(0)).unwrap();
        bed.kill(3);
        bed.put(0, KEY, v(1)).await.unwrap();
        bed.start(3).await;
        assert!(
            bed.get(3, KEY).await.is_err(),
            "not the origin's v0 before it caught up"
        );
        bed.catch_up(3, false).await;
        assert_eq!(bed.get(3, KEY).await.unwrap(), Some(v(1)));
    });
}

#[test]
fn an_upload_whose_answer_was_lost_is_not_uploaded_over_a_later_write() {
    block_on(async {
        let mut bed = bed().await;
        bed.put(0, KEY, v(1)).await.unwrap();
        bed.origin.lose_answers.store(1, Ordering::SeqCst);
        bed.propagate(0).await;
        assert_eq!(bed.staged(), 0, "the origin holds it: freed");
        bed.put(1, KEY, v(2)).await.unwrap();
        bed.heal().await;
        assert_eq!(bed.origin.body(KEY), Some(v(2)));
    });
}

#[test]
fn a_write_from_parts_lands_as_those_parts_with_the_etag_the_client_got() {
    block_on(async {
        let mut bed = bed().await;
        let parts = [Bytes::from(vec![1u8; 7000]), Bytes::from(vec![2u8; 3000])];
        let etag = bed.put_parts(0, KEY, &parts).await.unwrap();
        assert!(
            etag.ends_with("-2\""),
            "S3's multipart ETag, not the body's MD5: {etag}"
        );
        // The answer of the origin's complete call is lost: the origin holds the write with
        // the same ETag, so it is freed, not uploaded again.
        bed.origin.lose_answers.store(1, Ordering::SeqCst);
        bed.propagate(0).await;
        assert_eq!(bed.staged(), 0, "the origin holds it: freed");
        assert_eq!(bed.origin.etag(KEY), Some(etag));
        assert_eq!(bed.origin.body(KEY), Some(parts.concat().into()));
        bed.heal().await;
    });
}

#[test]
fn a_coordinator_killed_after_the_ack_propagates_after_its_restart() {
    block_on(async {
        let mut bed = bed().await;
        bed.origin.cut.store(true, Ordering::SeqCst);
        bed.put(0, KEY, v(1)).await.unwrap();
        bed.kill(0);
        // Another node took over propagating it, but the origin is cut: nothing lands.
        bed.propagate(1).await;
        bed.heal().await;
        assert_eq!(bed.origin.body(KEY), Some(v(1)));
    });
}

#[test]
fn an_overwrite_through_another_node_wins_over_the_staged_write() {
    block_on(async {
        let mut bed = bed().await;
        bed.origin.cut.store(true, Ordering::SeqCst);
        bed.put(0, KEY, v(1)).await.unwrap();
        bed.put(2, KEY, v(2)).await.unwrap();
        for i in 0..4 {
            assert_eq!(bed.get(i, KEY).await.unwrap(), Some(v(2)), "node {i}");
        }
        bed.heal().await;
        assert_eq!(bed.origin.body(KEY), Some(v(2)));
    });
}

#[test]
fn a_tiny_write_scrubs_clean_and_propagates() {
    block_on(async {
        let mut bed = bed().await;
        bed.origin.cut.store(true, Ordering::SeqCst);
        let tiny = Bytes::from_static(b"t/metadata/v.json@6;");
        bed.put(1, KEY, tiny.clone()).await.unwrap();
        bed.repair(1).await;
        bed.propagate(1).await;
        bed.heal().await;
        assert_eq!(bed.origin.body(KEY), Some(tiny));
    });
}

#[test]
fn a_flipped_byte_in_a_fragment_header_or_shard_is_found_by_the_scrub_and_rebuilt() {
    block_on(async {
        let mut bed = bed().await;
        bed.origin.cut.store(true, Ordering::SeqCst);
        // m = 1: one bad fragment per write can be rebuilt; a header byte in one, a shard
        // byte in the other.
        for (key, at) in [(KEY, 3u64), ("t/b", 200)] {
            bed.put(0, key, v(1)).await.unwrap();
            let r = bed.node(0).unwrap().staged.get(BUCKET, key).unwrap();
            let p = &r.placements[1];
            let holder: usize = p.node[1..].parse().unwrap();
            let store = &bed.node(holder).unwrap().store;
            store.fragments.corrupt(&r.id, p.index, at).unwrap();
        }
        assert_eq!(bed.repair(0).await, 2, "both flipped fragments rebuilt");
        assert_eq!(bed.repair(0).await, 0, "and then intact");
        bed.heal().await;
        assert_eq!(bed.origin.body(KEY), Some(v(1)));
    });
}

#[test]
fn a_body_that_does_not_match_its_content_md5_is_refused_and_leaves_the_write_before() {
    block_on(async {
        let mut bed = bed().await;
        bed.origin.cut.store(true, Ordering::SeqCst);
        bed.put(0, KEY, v(1)).await.unwrap();
        let md5_of_v3 = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            md5::Digest::finalize(<md5::Md5 as md5::Digest>::new_with_prefix(v(3))),
        );
        let headers = [("content-md5", md5_of_v3.as_str())];
        let expected = crate::digests::Expected::from_headers(headers.into_iter()).unwrap();
        let refused = bed.put_with(1, KEY, v(2), expected).await.unwrap_err();
        assert_eq!(refused.code, floe_core::S3ErrorCode::BadDigest);
        for i in 0..4 {
            let r = bed.node(i).unwrap().staged.get(BUCKET, KEY).unwrap();
            assert_eq!(r.geometry.size, 9000, "node {i} still indexes v1");
        }
        assert_eq!(bed.get(2, KEY).await.unwrap(), Some(v(1)));
        bed.heal().await;
        assert_eq!(bed.origin.body(KEY), Some(v(1)));
    });
}

#[test]
fn an_older_write_still_uploading_lands_before_the_write_that_overtook_it() {
    block_on(async {
        let bed = bed().await;
        bed.put(0, KEY, v(1)).await.unwrap();
        // v1's upload reads its body, then the link is slow for 1.5 s before the origin has it.
        bed.origin.slow_next_put_ms.store(1500, Ordering::SeqCst);
        let overtake = async {
            while bed.origin.puts_in_flight.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
            // v2 through another node while v1's upload is under way: its answer waits until
            // v1 landed (freeing v1 waits for that upload), and only then is v2 propagated.
            bed.put(1, KEY, v(2)).await.unwrap();
            bed.propagate(1).await;
        };
        tokio::join!(bed.propagate(0), overtake);
        let held = bed.origin.body(KEY).map(|b| b[0]);
        assert_eq!(
            held,
            Some(2),
            "the origin ends with the newer write (v2), not v1"
        );
    });
}

#[test]
fn a_coordinator_thawed_mid_upload_lands_before_the_delete_a_takeover_let_through() {
    block_on(async {
        let bed = bed().await;
        bed.put(0, KEY, v(1)).await.unwrap();
        // n0 uploads v1: its body is read, then n0 freezes for 1.5 s before the origin has it.
        bed.origin.slow_next_put_ms.store(1500, Ordering::SeqCst);
        let takeover = async {
            let frozen = || {
                bed.origin.puts_in_flight.load(Ordering::SeqCst) > 0
                    && bed.origin.slow_next_put_ms.load(Ordering::SeqCst) == 0
            };
            while !frozen() {
                tokio::task::yield_now().await;
            }
            // Its peers' detectors count n0 gone: a DELETE through n1 finds another node to
            // flush v1 (n0 is no member), then deletes. Freeing v1 reaches n0, which answers
            // once its own upload ended: the DELETE goes to the origin after v1 landed.
            bed.registry.hide("n0", true);
            bed.delete(1, KEY).await.unwrap();
        };
        tokio::join!(bed.propagate(0), takeover);
        assert_eq!(
            bed.origin.body(KEY),
            None,
            "the acknowledged DELETE stands: n0's late copy of v1 landed before it"
        );
    });
}

#[test]
fn a_node_frozen_during_a_write_reads_it_once_thawed() {
    block_on(async {
        let bed = bed().await;
        bed.origin.store(KEY, v(0)).unwrap();
        bed.origin.cut.store(true, Ordering::SeqCst);
        bed.pause(3);
        // Staged on the three awake nodes (n3 is in every view but answers nothing, so a
        // plan that picks it is short of w: then the write is refused, and tried again).
        let mut acked = false;
        for _ in 0..20 {
            if bed.put(0, KEY, v(1)).await.is_ok() {
                acked = true;
                break;
            }
        }
        assert!(acked, "some plan leaves the frozen node out");
        bed.resume(3);
        assert!(
            bed.get(3, KEY).await.is_err(),
            "not served before it caught up"
        );
        bed.catch_up(3, false).await;
        assert_eq!(bed.get(3, KEY).await.unwrap(), Some(v(1)));
    });
}
