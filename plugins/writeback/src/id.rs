//! The identity of one staged write: 16 random bytes, shown as 32 hex digits. Every PUT is a
//! new object under a new id, so two writes of one key share no fragment and no journal file.

use serde::{Deserialize, Serialize};

/// A staged write's id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ObjectId([u8; 16]);

impl ObjectId {
    /// A fresh random id.
    pub fn random() -> Self {
        Self(rand::random())
    }

    /// The raw bytes (as fragment headers record them).
    pub fn bytes(&self) -> &[u8; 16] {
        &self.0
    }

    /// Parses 32 hex digits (anything else, e.g. a path, is refused).
    pub fn parse(s: &str) -> Option<Self> {
        let mut b = [0u8; 16];
        (s.len() == 32 && hex::decode_to_slice(s, &mut b).is_ok()).then_some(Self(b))
    }
}

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl TryFrom<String> for ObjectId {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::parse(&s).ok_or_else(|| format!("not an object id: {s:?}"))
    }
}

impl From<ObjectId> for String {
    fn from(id: ObjectId) -> String {
        id.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_paths_are_refused() {
        let id = ObjectId::random();
        assert_eq!(ObjectId::parse(&id.to_string()), Some(id));
        assert_ne!(ObjectId::random(), id);
        assert_eq!(ObjectId::parse("../../etc/passwd"), None);
        assert_eq!(ObjectId::parse(&"g".repeat(32)), None);
    }
}
