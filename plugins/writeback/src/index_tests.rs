//! The index's ordering rules: a key's last acknowledgment wins whatever order its copies
//! arrive in (ties by id, the same on every node), and only the write indexed leaves it.

use std::sync::Arc;

use super::*;
use crate::journal::sample;

fn write(key: &str, acked_ms: u64) -> Arc<Record> {
    Arc::new(sample(key, 10, "\"e\"", acked_ms))
}

#[test]
fn the_later_acknowledgment_wins_in_either_order() {
    let (old, new) = (write("k", 100), write("k", 200));
    let index = Index::default();
    assert!(index.insert(old.clone()).kept);
    let second = index.insert(new.clone());
    assert!(second.kept);
    assert_eq!(second.displaced.map(|d| d.id), Some(old.id));
    assert_eq!(index.get("b", "k").map(|r| r.id), Some(new.id));

    let other_order = Index::default();
    assert!(other_order.insert(new.clone()).kept);
    let late_copy = other_order.insert(old.clone());
    assert!(
        !late_copy.kept,
        "an older write never displaces a later one"
    );
    assert_eq!(late_copy.displaced.map(|d| d.id), Some(old.id));
    assert_eq!(other_order.get("b", "k").map(|r| r.id), Some(new.id));
    assert_eq!(other_order.len(), 1);
}

#[test]
fn a_tie_is_broken_by_id_the_same_way_everywhere() {
    let (a, b) = (write("k", 100), write("k", 100));
    let winner = if a.id > b.id { a.id } else { b.id };
    for (first, second) in [(&a, &b), (&b, &a)] {
        let index = Index::default();
        index.insert(first.clone());
        index.insert(second.clone());
        assert_eq!(index.get("b", "k").map(|r| r.id), Some(winner));
    }
}

#[test]
fn a_copy_of_the_same_write_replaces_it_without_displacing_anything() {
    let index = Index::default();
    let w = write("k", 100);
    index.insert(w.clone());
    let again = index.insert(w.clone());
    assert!(again.kept && again.displaced.is_none());
    assert_eq!(index.len(), 1);
}

#[test]
fn only_the_indexed_write_is_removed_and_counts_follow() {
    let index = Index::default();
    let (old, new, other) = (write("k", 100), write("k", 200), write("j", 50));
    index.insert(old.clone());
    index.insert(new.clone());
    index.insert(other.clone());
    assert_eq!(index.len(), 2);
    assert!(!index.remove(&old), "a displaced write is not the key's");
    assert!(index.current(&new) && !index.current(&old));
    assert_eq!(
        index.all().iter().map(|r| r.id).collect::<Vec<_>>(),
        [other.id, new.id]
    );
    assert_eq!(
        index.remove_id(&other.id),
        [("b".to_owned(), "j".to_owned())]
    );
    assert!(index.remove(&new));
    assert_eq!(index.len(), 0);
    assert!(index.get("b", "k").is_none() && index.all().is_empty());
    assert!(index.remove_id(&new.id).is_empty());
}
