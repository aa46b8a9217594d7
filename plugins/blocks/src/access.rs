//! Access reports for the control plane's heat ledger: every served GET leaves one record in a
//! bounded queue, and the admin API drains it in batches. The serving path never waits: when the
//! queue is full (the control plane is slow or absent) the record is dropped and counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// Records kept for the control plane before new ones are dropped: one second of a busy node's
/// reads, small enough (about 64 bytes each) to never matter for memory.
pub const ACCESS_QUEUE: usize = 65_536;

/// One served read: which bytes of which version.
#[derive(Debug, Clone)]
pub struct Access {
    /// Bucket (the route's name).
    pub bucket: Arc<str>,
    /// Object key.
    pub key: Arc<str>,
    /// The version's ETag.
    pub etag: Arc<str>,
    /// First byte read.
    pub offset: u64,
    /// Bytes read.
    pub len: u64,
}

/// A bounded, lossy queue of [`Access`] records.
pub struct AccessLog {
    tx: SyncSender<Access>,
    rx: Mutex<Receiver<Access>>,
    dropped: AtomicU64,
}

impl Default for AccessLog {
    fn default() -> Self {
        Self::new(ACCESS_QUEUE)
    }
}

impl AccessLog {
    /// A queue holding at most `capacity` records.
    pub fn new(capacity: usize) -> Self {
        let (tx, rx) = sync_channel(capacity);
        Self {
            tx,
            rx: Mutex::new(rx),
            dropped: AtomicU64::new(0),
        }
    }

    /// Records an access; never blocks (a full queue drops the record).
    pub fn record(&self, a: Access) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(a) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes up to `max` queued records, oldest first.
    pub fn drain(&self, max: usize) -> Vec<Access> {
        let Ok(rx) = self.rx.lock() else {
            return Vec::new();
        };
        rx.try_iter().take(max).collect()
    }

    /// Records dropped so far because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(offset: u64) -> Access {
        Access {
            bucket: Arc::from("b"),
            key: Arc::from("k"),
            etag: Arc::from("\"e\""),
            offset,
            len: 1,
        }
    }

    #[test]
    fn full_queue_drops_and_counts() {
        let log = AccessLog::new(2);
        (0..5).for_each(|i| log.record(a(i)));
        assert_eq!(log.dropped(), 3);
        let got: Vec<u64> = log.drain(10).iter().map(|x| x.offset).collect();
        assert_eq!(got, vec![0, 1]);
        log.record(a(9));
        assert_eq!(log.drain(10).len(), 1);
        assert_eq!(log.dropped(), 3);
    }

    #[test]
    fn drain_takes_at_most_max() {
        let log = AccessLog::new(8);
        (0..6).for_each(|i| log.record(a(i)));
        assert_eq!(log.drain(4).len(), 4);
        assert_eq!(log.drain(4).len(), 2);
    }
}
