//! The client body read carried in the vendored pingora-core (vendor/README.md): a sized body's
//! read hands out the buffer it was read into instead of a copy. Through a real HTTP/1 client
//! session over an in-memory socket, every kind of body must still read back exactly: sized
//! bodies sent in pieces with pauses (and with bytes past their end), chunked bodies, bodies
//! read until the connection closes, and a sized body cut off early must fail.

// A test crate: its helpers (not only its #[test]s) unwrap.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::time::Duration;

use bytes::Bytes;
use pingora::http::RequestHeader;
use pingora::protocols::http::v1::client::HttpSession;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `head` then `body` in `pieces`-byte writes (a pause after each), then closes if
/// `close`; returns what the client side read.
async fn exchange(head: &str, body: &[u8], piece: usize, close: bool) -> (Vec<u8>, bool) {
    let (client, mut server) = tokio::io::duplex(4096);
    let mut session = HttpSession::new(Box::new(client));
    let req = RequestHeader::build("GET", b"/bucket/key", None).unwrap();
    session.write_request_header(Box::new(req)).await.unwrap();
    let (head, body) = (head.as_bytes().to_vec(), body.to_vec());
    let server_side = tokio::spawn(async move {
        let mut request = [0u8; 512];
        let _ = server.read(&mut request).await.unwrap();
        server.write_all(&head).await.unwrap();
        for part in body.chunks(piece.max(1)) {
            server.write_all(part).await.unwrap();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if !close {
            // Held open until the client is done (a keep-alive connection).
            let _ = server.read(&mut request).await;
        }
    });
    session.read_response().await.unwrap();
    let mut got = Vec::new();
    let failed = loop {
        match session.read_body_bytes().await {
            Ok(Some(b)) => got.extend_from_slice(&b),
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    drop(session);
    server_side.await.unwrap();
    (got, failed)
}

fn body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn a_sized_body_reads_back_exactly_whatever_its_pieces() {
    for (len, piece) in [
        (0, 1),
        (1, 1),
        (70_000, 1000),
        (200_000, 65_536),
        (300_000, 4096),
    ] {
        let data = body(len);
        let head = format!("HTTP/1.1 206 Partial Content\r\nContent-Length: {len}\r\n\r\n");
        let (got, failed) = run(exchange(&head, &data, piece, false));
        assert!(!failed, "{len} in {piece}s");
        assert_eq!(got, data, "{len} in {piece}s");
    }
}

#[test]
fn bytes_past_a_sized_body_are_not_part_of_it() {
    let data = body(10_000);
    let mut sent = data.clone();
    sent.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    let head = "HTTP/1.1 200 OK\r\nContent-Length: 10000\r\n\r\n";
    let (got, _) = run(exchange(head, &sent, 3000, false));
    assert_eq!(got, data);
}

#[test]
fn a_sized_body_cut_off_fails() {
    let data = body(50_000);
    let head = "HTTP/1.1 200 OK\r\nContent-Length: 80000\r\n\r\n";
    let (got, failed) = run(exchange(head, &data, 7000, true));
    assert!(failed, "a short body is an error");
    assert_eq!(got, data, "what came before the cut is what was sent");
}

#[test]
fn chunked_and_until_close_bodies_read_back_exactly() {
    let data = body(150_000);
    let mut chunked = Vec::new();
    for part in data.chunks(40_000) {
        chunked.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        chunked.extend_from_slice(part);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    let (got, failed) = run(exchange(head, &chunked, 5000, false));
    assert!(!failed);
    assert_eq!(got, data);
    let head = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
    let (got, _) = run(exchange(head, &data, 9000, true));
    assert_eq!(got, data);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// A sized body of any length in pieces of any size reads back exactly, and the pieces the
    /// client gets are the body's bytes in order with none empty.
    #[test]
    fn any_sized_body_in_any_pieces_reads_back(len in 0usize..200_000, piece in 1usize..70_000) {
        let data = body(len);
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
        let (got, failed) = run(exchange(&head, &data, piece, false));
        prop_assert!(!failed);
        prop_assert_eq!(Bytes::from(got), Bytes::from(data));
    }
}
