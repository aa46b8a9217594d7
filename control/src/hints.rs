//! Column-chunk hints for the proxies' fills: after each commit, the table's file map (every
//! live data file's column-chunk ranges, from its footer) goes to every node, replacing what
//! the table published before. A proxy whose miss starts a known chunk fetches on to the
//! chunk's end. Hints only shape fills: a node that lacks them reads correctly, just with more
//! round trips.

use std::collections::BTreeMap;

use floe_core::wire::{ChunksBody, FileChunksDoc};

use crate::mapper::{FileInfo, FileKey};
use crate::node::NodeClient;
use crate::state::Control;

/// Files per request: bodies stay far below the admin listener's 16 MiB cap even for files
/// with thousands of chunks.
pub const FILES_PER_POST: usize = 2000;

/// The requests that publish `files` of `table`, per bucket: the first batch of each bucket
/// replaces the table's earlier hints there.
pub fn bodies(table: &str, files: &[(FileKey, FileInfo)]) -> Vec<(String, ChunksBody)> {
    let mut by_bucket: BTreeMap<&str, Vec<FileChunksDoc>> = BTreeMap::new();
    for ((bucket, key), info) in files {
        let c = info.chunks.iter().flat_map(|c| [c.start, c.len]).collect();
        by_bucket.entry(bucket).or_default().push(FileChunksDoc {
            k: key.clone(),
            s: info.size,
            c,
        });
    }
    let mut out = Vec::new();
    for (bucket, docs) in by_bucket {
        for (i, batch) in docs.chunks(FILES_PER_POST).enumerate() {
            let body = ChunksBody {
                table: table.to_owned(),
                replace: i == 0,
                files: batch.to_vec(),
            };
            out.push((bucket.to_owned(), body));
        }
    }
    out
}

/// Sends `table`'s chunks to every node; failures are logged (the node fills without them).
pub async fn publish(ctl: &Control, table: &str, files: &[(FileKey, FileInfo)]) {
    let bodies = bodies(table, files);
    for n in ctl.nodes.current().iter() {
        publish_to(n, table, &bodies).await;
    }
}

/// Sends one table's chunk bodies to `n`; failures are logged.
pub async fn publish_to(n: &NodeClient, table: &str, bodies: &[(String, ChunksBody)]) {
    for (bucket, body) in bodies {
        if let Err(e) = n.chunks(bucket, body).await {
            tracing::warn!(node = n.url(), bucket, table, error = %e, "chunk hints not published");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_buckets_first_batch_replaces_and_chunks_interleave() {
        let info = crate::mapper::tests::info("ns.t");
        let mut files: Vec<(FileKey, FileInfo)> = (0..FILES_PER_POST + 1)
            .map(|i| (("b1".to_owned(), format!("k{i}")), info.clone()))
            .collect();
        files.push((("b2".to_owned(), "x".to_owned()), info));
        let out = bodies("ns.t", &files);
        let shape: Vec<(&str, bool, usize)> = out
            .iter()
            .map(|(b, body)| (b.as_str(), body.replace, body.files.len()))
            .collect();
        assert_eq!(
            shape,
            [
                ("b1", true, FILES_PER_POST),
                ("b1", false, 1),
                ("b2", true, 1)
            ]
        );
        assert_eq!(out[2].1.files[0].c, [4, 40, 44, 40]);
    }
}
