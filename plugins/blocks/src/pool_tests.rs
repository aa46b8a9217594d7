use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use proptest::prelude::*;

use super::*;

const MIB: usize = 1 << 20;

fn pool(bound: usize) -> Arc<BufferPool> {
    Arc::new(BufferPool::new(bound))
}

fn filled(p: &Arc<BufferPool>, len: usize, byte: u8) -> Bytes {
    let mut f = p.take(len);
    f.extend_from_slice(&vec![byte; len]);
    f.freeze()
}

#[test]
fn a_dropped_buffer_returns_and_is_handed_out_again() {
    let p = pool(64 * MIB);
    let b = filled(&p, 2 * MIB, 7);
    let ptr = b.as_ptr();
    assert_eq!(p.free_bytes(), 0);
    drop(b);
    assert_eq!(p.free_bytes(), 2 * MIB);
    let again = p.take(2 * MIB);
    assert!(
        again.is_empty(),
        "a reused buffer shows none of its old bytes"
    );
    let b = {
        let mut f = again;
        f.extend_from_slice(&[1; 10]);
        f.extend_from_slice(&vec![2; 2 * MIB - 10]);
        f.freeze()
    };
    assert_eq!(b.as_ptr(), ptr, "the same buffer came back");
    assert_eq!(&b[..11], &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]);
    assert_eq!(p.stats.reused.load(Relaxed), 1);
    assert_eq!(p.stats.fresh.load(Relaxed), 1);
    assert_eq!(p.free_bytes(), 0);
}

#[test]
fn a_buffer_is_never_handed_out_twice() {
    let p = pool(64 * MIB);
    drop(filled(&p, MIB, 1));
    let a = filled(&p, MIB, 2);
    let b = filled(&p, MIB, 3);
    assert_ne!(a.as_ptr(), b.as_ptr());
    assert!(a.iter().all(|x| *x == 2) && b.iter().all(|x| *x == 3));
    assert_eq!(p.stats.reused.load(Relaxed), 1);
    assert_eq!(p.stats.fresh.load(Relaxed), 2);
}

#[test]
fn a_buffer_returns_only_when_its_last_clone_drops() {
    let p = pool(64 * MIB);
    let b = filled(&p, 256 << 10, 9);
    let slice = b.slice(10..20);
    let clone = b.clone();
    drop(b);
    drop(clone);
    assert_eq!(p.free_bytes(), 0, "a slice still sends it");
    assert_eq!(&slice[..], &[9; 10]);
    drop(slice);
    assert_eq!(p.free_bytes(), 256 << 10);
}

#[test]
fn the_pool_keeps_no_more_than_its_bound() {
    let p = pool(3 * MIB);
    let held: Vec<Bytes> = (0..3).map(|i| filled(&p, 2 * MIB, i)).collect();
    drop(held);
    assert_eq!(p.free_bytes(), 2 * MIB);
    assert_eq!(p.stats.kept.load(Relaxed), 1);
    assert_eq!(p.stats.freed.load(Relaxed), 2);
    p.set_bound(0);
    drop(filled(&p, 2 * MIB, 0));
    assert_eq!(
        p.free_bytes(),
        0,
        "the one kept was reused; at bound 0 none is kept"
    );
}

#[test]
fn a_fill_whose_class_is_empty_takes_a_larger_free_buffer_cut_to_its_class() {
    let p = pool(64 * MIB);
    drop(filled(&p, 2 * MIB, 1));
    let (_, cap) = class_of(700_000).unwrap();
    let b = filled(&p, 700_000, 2);
    assert_eq!(p.stats.reused.load(Relaxed), 1);
    assert_eq!(
        p.stats.fresh.load(Relaxed),
        1,
        "only the first buffer was new"
    );
    assert!(b.iter().all(|x| *x == 2));
    drop(b);
    assert_eq!(
        p.free_bytes(),
        cap,
        "it came back as its new class, weighed as such"
    );
    drop(filled(&p, 2 * MIB, 3));
    assert_eq!(
        p.stats.fresh.load(Relaxed),
        2,
        "a smaller free buffer never serves a larger fill"
    );
}

#[test]
fn at_its_bound_the_pool_frees_smaller_buffers_to_keep_a_larger_one() {
    let p = pool(2 * MIB);
    let small: Vec<Bytes> = (0..4).map(|i| filled(&p, 256 << 10, i)).collect();
    drop(small);
    assert_eq!(p.free_bytes(), MIB);
    drop(filled(&p, 2 * MIB, 9));
    assert_eq!(p.free_bytes(), 2 * MIB, "the four small ones made room");
    assert_eq!(p.stats.freed.load(Relaxed), 4);
    drop(filled(&p, 256 << 10, 1));
    assert_eq!(p.stats.reused.load(Relaxed), 1, "the large one served it");
    assert_eq!(p.free_bytes(), 256 << 10);
}

#[test]
fn an_abandoned_fill_gives_its_buffer_back() {
    let p = pool(64 * MIB);
    let mut f = p.take(MIB);
    f.extend_from_slice(&[1; 100]);
    drop(f);
    assert_eq!(p.free_bytes(), MIB);
}

#[test]
fn small_buffers_are_exact_and_not_pooled() {
    let p = pool(64 * MIB);
    drop(filled(&p, 100, 1));
    assert_eq!(p.free_bytes(), 0);
    assert_eq!(footprint(100), 100);
    assert_eq!(p.stats.fresh.load(Relaxed), 0);
}

#[test]
fn reading_into_a_buffer_takes_exactly_the_length() {
    let p = pool(64 * MIB);
    let src: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    let mut r = &src[..];
    let mut f = p.take(150_000);
    f.read_exact_from(&mut r, 150_000).unwrap();
    assert_eq!(r.len(), 50_000);
    assert_eq!(&f.freeze()[..], &src[..150_000]);
    let mut short = &src[..10];
    assert!(p.take(MIN_POOLED).read_exact_from(&mut short, 20).is_err());
}

#[test]
fn class_capacities_match_their_indices() {
    for class in 0..CLASSES {
        let cap = class_cap(class);
        assert_eq!(class_of(cap), Some((class, cap)), "class {class}");
    }
    assert_eq!(class_of(MAX_POOLED).map(|c| c.1), Some(MAX_POOLED));
    assert_eq!(class_of(MAX_POOLED + 1), None);
    assert_eq!(class_of(MIN_POOLED - 1), None);
}

proptest! {
    #[test]
    fn a_class_holds_its_length_with_little_to_spare(len in MIN_POOLED..=MAX_POOLED) {
        let (class, cap) = class_of(len).unwrap();
        prop_assert!(cap >= len);
        prop_assert!(class < CLASSES);
        prop_assert_eq!(class_cap(class), cap);
        if len > 128 << 10 {
            prop_assert!(cap - len <= len / 8, "{} -> {}", len, cap);
        } else {
            prop_assert!(cap - len < MIN_POOLED);
        }
    }
}

fn reserved(reserve: usize, bound: usize) -> Arc<BufferPool> {
    let p = pool(bound);
    p.set_reserve(reserve);
    p
}

#[test]
fn populating_fills_the_reserve_with_written_buffers_and_stops_there() {
    let p = reserved(10 * MIB, 0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    assert_eq!(
        crate::pool::populate::populate(&p, 2 * MIB, &stop),
        10 * MIB
    );
    assert_eq!(p.populate_state(), PopulateState::Done);
    assert_eq!(p.free_bytes(), 10 * MIB);
    assert_eq!(p.populate_one(2 * MIB), None, "the reserve is full");
    let held: Vec<Bytes> = (0..5).map(|i| filled(&p, 2 * MIB, i)).collect();
    assert_eq!(
        p.stats.reused.load(Relaxed),
        5,
        "fills took the populated buffers"
    );
    assert_eq!(p.stats.fresh.load(Relaxed), 0);
    assert_eq!((p.free_bytes(), p.out_bytes()), (0, 10 * MIB));
    assert!(held
        .iter()
        .enumerate()
        .all(|(i, b)| b.iter().all(|x| *x == i as u8)));
    let doc = p.doc();
    assert_eq!(
        (doc.reserve_bytes, doc.populated_bytes),
        (10 << 20, 10 << 20)
    );
    assert_eq!(doc.populate, "done");
}

#[test]
fn populating_stops_when_told() {
    let p = reserved(10 * MIB, 0);
    let stop = std::sync::atomic::AtomicBool::new(true);
    assert_eq!(crate::pool::populate::populate(&p, 2 * MIB, &stop), 0);
    assert_eq!(p.populate_state(), PopulateState::Stopped);
    assert_eq!(p.free_bytes(), 0);
}

#[test]
fn populating_leaves_room_for_the_buffers_handed_out() {
    let p = reserved(8 * MIB, 0);
    let out = filled(&p, 2 * MIB, 1);
    let stop = std::sync::atomic::AtomicBool::new(false);
    assert_eq!(crate::pool::populate::populate(&p, 2 * MIB, &stop), 6 * MIB);
    drop(out);
    assert_eq!(p.free_bytes(), 8 * MIB, "the returned one fits the reserve");
}

#[test]
fn with_a_reserve_free_and_handed_out_bytes_stay_within_it() {
    let p = reserved(8 * MIB, 0);
    let held: Vec<Bytes> = (0..6).map(|i| filled(&p, 2 * MIB, i)).collect();
    assert_eq!(p.out_bytes(), 12 * MIB, "fills may go past the reserve");
    drop(held);
    assert_eq!(p.out_bytes(), 0);
    assert_eq!(p.free_bytes(), 8 * MIB, "the pool kept the reserve's worth");
    assert_eq!(p.stats.freed.load(Relaxed), 2, "and freed the rest");
    let a = filled(&p, 2 * MIB, 7);
    let b = filled(&p, 2 * MIB, 8);
    drop(filled(&p, 2 * MIB, 9));
    assert_eq!(
        (p.free_bytes(), p.out_bytes()),
        (4 * MIB, 4 * MIB),
        "a buffer returns while there is room beside those out"
    );
    drop((a, b));
    assert_eq!(p.free_bytes(), 8 * MIB);
}

#[test]
fn a_cut_buffer_is_counted_out_as_its_class() {
    let p = reserved(4 * MIB, 0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    crate::pool::populate::populate(&p, 2 * MIB, &stop);
    let small = filled(&p, 64 << 10, 5);
    assert_eq!((p.free_bytes(), p.out_bytes()), (2 * MIB, 64 << 10));
    drop(small);
    assert_eq!((p.free_bytes(), p.out_bytes()), (2 * MIB + (64 << 10), 0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Any sequence of fills and drops, with a reserve populated first: a live buffer is never
    /// handed out again, every byte reads back, and once all are dropped nothing is counted
    /// out and the pool holds no more than its reserve.
    #[test]
    fn with_a_reserve_every_buffer_is_accounted_for(
        ops in proptest::collection::vec((any::<bool>(), MIN_POOLED..=3 * MIB, any::<u8>()), 1..60)
    ) {
        let p = reserved(16 * MIB, MIB);
        let stop = std::sync::atomic::AtomicBool::new(false);
        crate::pool::populate::populate(&p, 2 * MIB, &stop);
        let mut live: Vec<(Bytes, u8)> = Vec::new();
        for (keep, len, byte) in ops {
            if !keep && !live.is_empty() {
                live.swap_remove(byte as usize % live.len());
                continue;
            }
            let b = filled(&p, len, byte);
            prop_assert!(live.iter().all(|(o, _)| o.as_ptr() != b.as_ptr()));
            live.push((b, byte));
        }
        prop_assert!(live.iter().all(|(b, x)| b.iter().all(|y| y == x)));
        drop(live);
        prop_assert_eq!(p.out_bytes(), 0);
        prop_assert!(p.free_bytes() <= 16 * MIB);
    }
}

#[test]
fn a_fresh_buffer_past_the_reserve_frees_smaller_free_ones_to_make_room() {
    let p = reserved(4 * MIB, 0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    assert_eq!(crate::pool::populate::populate(&p, MIB, &stop), 4 * MIB);
    let big = filled(&p, 3 * MIB, 1);
    assert_eq!(
        p.stats.fresh.load(Relaxed),
        1,
        "no free buffer was large enough"
    );
    assert_eq!((p.free_bytes(), p.out_bytes()), (MIB, 3 * MIB));
    assert_eq!(p.stats.freed.load(Relaxed), 3);
    drop(big);
    assert_eq!(p.free_bytes(), 4 * MIB, "back within the reserve");
}
