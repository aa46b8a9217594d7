//! This node's fragment store and journal on the peer API (`/v2/x/wb/...`), the same for a
//! call from another node and from this node's own coordinator. The calls are
//! [`crate::wire::Call`]s:
//!
//! - `PutFragment` writes a piece of a fragment (the first piece to arrive reserves its
//!   announced length, 507 over the ceiling; pieces come in any order, 409 for one repeated or
//!   overlapping); `CommitFragment` fsyncs it into place and answers 200 with this node's id:
//!   the durability report;
//! - `ReadFragment` reads it; `FreeFragments` frees some fragments (a repair replacing them);
//!   `FreeWrite` frees every fragment and journal copy of a write kept here;
//! - `KeepJournal` keeps a copy of a coordinator's journal record; `HasJournal` answers 200
//!   while a record is kept here, 410 once freed, else 404; `Freed` lists the freed ids.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use floe_core::fleet::{PeerCall, PeerReply};

use crate::fragments::{FragmentWriter, Fragments};
use crate::id::ObjectId;
use crate::journal::{Journal, Record};
use crate::wire::Call;

/// The service's name on the peer API.
pub const SERVICE: &str = "wb";

/// A node's fragment store and journal, as the peer API serves them.
pub struct Store {
    /// This node's id.
    pub node: Arc<str>,
    /// Fragments kept here.
    pub fragments: Fragments,
    /// Journal records (this node's and copies).
    pub journal: Journal,
    receiving: Mutex<HashMap<(ObjectId, u8), Arc<FragmentWriter>>>,
}

fn reply(status: u16, body: impl Into<Bytes>) -> PeerReply {
    PeerReply {
        status,
        body: body.into(),
    }
}

impl Store {
    /// A store over `fragments` and `journal`.
    pub fn new(node: Arc<str>, fragments: Fragments, journal: Journal) -> Self {
        Self {
            node,
            fragments,
            journal,
            receiving: Mutex::default(),
        }
    }

    /// Answers one peer call (blocking file I/O: run it on a blocking thread).
    pub fn answer(&self, call: &PeerCall) -> PeerReply {
        match Call::parse(call.method, &call.path) {
            Ok(c) => self.answer_call(&c, &call.body),
            Err(e) => reply(400, e.to_string()),
        }
    }

    /// Answers one decoded call whose body is `body` (blocking file I/O).
    pub fn answer_call(&self, call: &Call, body: &[u8]) -> PeerReply {
        match call {
            Call::PutFragment { id, idx, len, off } => self.append(*id, *idx, *len, *off, body),
            Call::CommitFragment { id, idx } => self.commit(*id, *idx),
            Call::ReadFragment { id, idx, off, len } => {
                match self.fragments.read(id, *idx, *off, *len) {
                    Ok(b) if b.len() as u64 == *len => reply(200, b),
                    Ok(_) => reply(416, "short fragment"),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        reply(404, "no such fragment")
                    }
                    Err(e) => reply(500, e.to_string()),
                }
            }
            Call::FreeFragments { id, idx } => {
                for i in idx {
                    if let Ok(mut r) = self.receiving.lock() {
                        r.remove(&(*id, *i));
                    }
                    if let Err(e) = self.fragments.remove(id, *i) {
                        return reply(500, e.to_string());
                    }
                }
                reply(200, "")
            }
            Call::FreeWrite { id, .. } => match self.forget(id) {
                Ok(()) => reply(200, ""),
                Err(e) => reply(500, e.to_string()),
            },
            Call::HasJournal { id } => match self.journal.has(id) {
                true => reply(200, ""),
                false if self.journal.is_freed(id) => reply(410, "freed"),
                false => reply(404, "no such record"),
            },
            Call::Freed => match self.journal.freed() {
                Ok(ids) => match serde_json::to_vec(&ids) {
                    Ok(doc) => reply(200, doc),
                    Err(e) => reply(500, e.to_string()),
                },
                Err(e) => reply(500, e.to_string()),
            },
            Call::KeepJournal => match serde_json::from_slice::<Record>(body) {
                // A write freed here is never kept again (a copy handed back late).
                Ok(r) if self.journal.is_freed(&r.id) => reply(410, "freed"),
                Ok(r) => match self.journal.keep(&r) {
                    Ok(()) => reply(200, ""),
                    Err(e) => reply(500, e.to_string()),
                },
                Err(e) => reply(400, e.to_string()),
            },
            Call::Journals
            | Call::Flush { .. }
            | Call::Upload { .. }
            | Call::DropUpload { .. }
            | Call::Uploads { .. }
            | Call::Staged { .. } => reply(400, "not a call to the fragment store"),
        }
    }

    fn append(&self, id: ObjectId, idx: u8, len: u64, off: u64, body: &[u8]) -> PeerReply {
        let w = {
            let Ok(mut r) = self.receiving.lock() else {
                return reply(500, "poisoned");
            };
            match r.get(&(id, idx)) {
                Some(w) if w.announced() == len => w.clone(),
                Some(_) => return reply(400, "fragment length differs from its first piece"),
                None => {
                    let Some(res) = self.fragments.reserve(len) else {
                        return reply(507, "write-back ceiling reached");
                    };
                    match self.fragments.writer(&id, idx, len, &self.node, res) {
                        Ok(w) => r.entry((id, idx)).or_insert(Arc::new(w)).clone(),
                        Err(e) => return reply(500, e.to_string()),
                    }
                }
            }
        };
        match w.write_at(off, body) {
            Ok(()) => reply(200, ""),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => reply(409, e.to_string()),
            Err(e) => reply(400, e.to_string()),
        }
    }

    fn commit(&self, id: ObjectId, idx: u8) -> PeerReply {
        let taken = self
            .receiving
            .lock()
            .ok()
            .and_then(|mut r| r.remove(&(id, idx)));
        let Some(w) = taken else {
            return reply(409, "no such fragment being received");
        };
        let w = match Arc::try_unwrap(w) {
            Ok(w) if w.written() == w.announced() => w,
            Ok(w) => return self.receive_on(id, idx, Arc::new(w), "fragment incomplete"),
            Err(w) => return self.receive_on(id, idx, w, "fragment pieces still arriving"),
        };
        match w.finish() {
            Ok(_) => reply(200, self.node.to_string()),
            Err(e) => reply(500, e.to_string()),
        }
    }

    /// A commit that came too early: the fragment stays being received.
    fn receive_on(&self, id: ObjectId, idx: u8, w: Arc<FragmentWriter>, why: &str) -> PeerReply {
        if let Ok(mut r) = self.receiving.lock() {
            r.insert((id, idx), w);
        }
        reply(409, why.to_owned())
    }

    /// Frees every fragment and the journal record of `id` kept here.
    pub fn forget(&self, id: &ObjectId) -> std::io::Result<()> {
        for idx in 0..32u8 {
            if let Ok(mut r) = self.receiving.lock() {
                r.remove(&(*id, idx));
            }
            if self.fragments.has(id, idx) {
                self.fragments.remove(id, idx)?;
            }
        }
        self.journal.tombstone(id)?;
        self.journal.remove(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(c: Call, body: &[u8]) -> PeerCall {
        c.with_body(Bytes::copy_from_slice(body))
    }

    #[test]
    fn a_fragment_arrives_in_pieces_commits_and_reads_back() {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(
            Arc::from("n1"),
            Fragments::open(&d.path().join("f"), 1000).unwrap(),
            Journal::open(&d.path().join("j")).unwrap(),
        );
        let id = ObjectId::random();
        let put = |off: u64, b: &[u8]| {
            s.answer(&call(
                Call::PutFragment {
                    id,
                    idx: 2,
                    len: 6,
                    off,
                },
                b,
            ))
        };
        assert_eq!(put(3, b"def").status, 200, "pieces arrive in any order");
        let early = s.answer(&call(Call::CommitFragment { id, idx: 2 }, b""));
        assert_eq!(early.status, 409, "a commit before every piece is refused");
        assert_eq!(put(0, b"abc").status, 200);
        assert_eq!(put(0, b"abc").status, 409, "a repeated piece is refused");
        let rep = s.answer(&call(Call::CommitFragment { id, idx: 2 }, b""));
        assert_eq!((rep.status, &rep.body[..]), (200, &b"n1"[..]));
        let got = s.answer(&call(
            Call::ReadFragment {
                id,
                idx: 2,
                off: 1,
                len: 4,
            },
            b"",
        ));
        assert_eq!(&got.body[..], b"bcde");
        let big = s.answer(&call(
            Call::PutFragment {
                id,
                idx: 3,
                len: 5000,
                off: 0,
            },
            b"x",
        ));
        assert_eq!(big.status, 507);
        assert_eq!(
            s.answer(&call(
                Call::FreeWrite {
                    id,
                    at_origin: false
                },
                b""
            ))
            .status,
            200
        );
        let gone = s.answer(&call(
            Call::ReadFragment {
                id,
                idx: 2,
                off: 0,
                len: 1,
            },
            b"",
        ));
        assert_eq!(gone.status, 404);
        assert_eq!(s.fragments.used(), 0);
    }
}
