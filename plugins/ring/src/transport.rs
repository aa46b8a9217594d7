//! Chitchat's UDP transport with every datagram authenticated by the fleet secret: an
//! HMAC-SHA256 tag (truncated to 16 bytes) over the cluster id and the serialized envelope.
//! A datagram without a valid tag is dropped before chitchat sees it, so an outsider's packet
//! changes no node's view. Replayed datagrams only repeat versions chitchat already holds.

use std::net::SocketAddr;
use std::sync::Arc;

use async_trait::async_trait;
use chitchat::transport::{Socket, Transport};
use chitchat::{ChitchatMessage, Deserializable, Serializable};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes of tag appended to each datagram.
const TAG: usize = 16;
/// Largest UDP payload.
const MAX_DATAGRAM: usize = 65_507;

/// Opens authenticated sockets.
pub struct HmacTransport {
    key: Arc<Vec<u8>>,
}

impl HmacTransport {
    /// A transport keyed by the fleet secret and the cluster id.
    pub fn new(secret: &[u8], cluster_id: &str) -> Self {
        let mut key = Vec::with_capacity(secret.len() + cluster_id.len() + 1);
        key.extend_from_slice(secret);
        key.push(0);
        key.extend_from_slice(cluster_id.as_bytes());
        Self { key: Arc::new(key) }
    }
}

#[async_trait]
impl Transport for HmacTransport {
    async fn open(&self, bind: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let socket = tokio::net::UdpSocket::bind(bind)
            .await
            .map_err(|e| anyhow::anyhow!("cannot bind gossip to {bind}/udp: {e}"))?;
        Ok(Box::new(HmacSocket {
            socket,
            key: self.key.clone(),
            buf: vec![0; MAX_DATAGRAM],
        }))
    }
}

struct HmacSocket {
    socket: tokio::net::UdpSocket,
    key: Arc<Vec<u8>>,
    buf: Vec<u8>,
}

/// The tag of `payload` under `key`.
pub fn tag(key: &[u8], payload: &[u8]) -> [u8; TAG] {
    let mut out = [0u8; TAG];
    // HMAC takes keys of any length; new_from_slice cannot fail for it.
    if let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) {
        mac.update(payload);
        out.copy_from_slice(&mac.finalize().into_bytes()[..TAG]);
    }
    out
}

/// The payload of an authentic `datagram` (its tag checked in constant time), or `None`.
pub fn open_datagram<'a>(key: &[u8], datagram: &'a [u8]) -> Option<&'a [u8]> {
    let split = datagram.len().checked_sub(TAG)?;
    let (payload, got) = datagram.split_at(split);
    let want = tag(key, payload);
    bool::from(subtle::ConstantTimeEq::ct_eq(&want[..], got)).then_some(payload)
}

#[async_trait]
impl Socket for HmacSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        let mut payload = msg.serialize_to_vec();
        let t = tag(&self.key, &payload);
        payload.extend_from_slice(&t);
        if payload.len() > MAX_DATAGRAM {
            tracing::warn!(bytes = payload.len(), "gossip message too large; not sent");
            return Ok(());
        }
        // A peer that is gone is the failure detector's business, not a broken transport.
        match self.socket.send_to(&payload, to).await {
            Ok(_) => crate::metrics::with(|m| m.gossip_messages.with_label_values(&["sent"]).inc()),
            Err(e) => tracing::debug!(%to, error = %e, "gossip send failed"),
        }
        Ok(())
    }

    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        loop {
            let (n, from) = match self.socket.recv_from(&mut self.buf).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(error = %e, "gossip recv error");
                    continue;
                }
            };
            let Some(mut payload) = open_datagram(&self.key, &self.buf[..n]) else {
                crate::metrics::with(|m| m.gossip_rejected.inc());
                tracing::debug!(%from, bytes = n, "gossip datagram without a valid tag dropped");
                continue;
            };
            match ChitchatMessage::deserialize(&mut payload) {
                Ok(msg) => {
                    crate::metrics::with(|m| {
                        m.gossip_messages.with_label_values(&["received"]).inc()
                    });
                    return Ok((from, msg));
                }
                Err(e) => tracing::warn!(%from, error = %e, "authentic but unreadable gossip"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_right_key_opens_a_datagram() {
        let mut d = b"hello".to_vec();
        d.extend_from_slice(&tag(b"k1", b"hello"));
        assert_eq!(open_datagram(b"k1", &d), Some(&b"hello"[..]));
        assert_eq!(open_datagram(b"k2", &d), None);
        d[0] ^= 1;
        assert_eq!(open_datagram(b"k1", &d), None);
        assert_eq!(open_datagram(b"k1", b"short"), None);
    }
}
