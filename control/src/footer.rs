//! Parquet footers of live files: a bounded suffix read through node 0 (a second read only when
//! the footer is larger), warmed on the other nodes by key, decoded with the parquet crate into
//! the file map's column chunk ranges.

use std::sync::Arc;

use futures::{stream, StreamExt};
use parquet::file::metadata::{FooterTail, ParquetMetaDataReader};

use crate::error::ControlError;
use crate::mapper::{Chunk, FileInfo, FileKey};
use crate::node::Span;
use crate::state::{Control, WarmPhase};
use crate::warmer::{progress, warm_others, LiveFile};

/// Reads each new live file's footer through node 0 (a bounded suffix; a second read only when
/// the footer is larger), warms it on the others, and returns the file map entries.
pub async fn footers(
    ctl: &Arc<Control>,
    table: &str,
    live: &[LiveFile],
) -> Vec<(FileKey, FileInfo)> {
    let budget = ctl.settings.warm.table_budget_bytes;
    // Files are immutable: one mapped at an earlier commit is warm already and maps the same.
    let known = ctl.files.load();
    let known = &known;
    let out: Vec<Option<(FileKey, FileInfo)>> = stream::iter(live.iter().cloned())
        .map(|f| async move {
            if let Some(info) = known.get(&f.loc) {
                progress(ctl, table, 0, 1, 0);
                return Some((f.loc, FileInfo::clone(info)));
            }
            let spent = ctl.spent(table);
            if spent >= budget {
                ctl.table(table, |t| {
                    t.warm.phase = WarmPhase::OverBudget;
                    t.warm.note = format!("stopped at the table budget of {budget} bytes");
                });
                return None;
            }
            match footer(ctl, table, &f).await {
                Ok(info) => Some((f.loc, info)),
                Err(e) => {
                    tracing::warn!(file = %f.loc.1, error = %e, "footer not warmed");
                    None
                }
            }
        })
        .buffer_unordered(ctl.settings.warm.concurrency)
        .collect()
        .await;
    out.into_iter().flatten().collect()
}

async fn footer(ctl: &Arc<Control>, table: &str, f: &LiveFile) -> Result<FileInfo, ControlError> {
    let bad = |reason: String| ControlError::Footer {
        key: f.loc.1.clone(),
        reason,
    };
    let first_read = ctl.settings.warm.footer_bytes.min(f.size);
    ctl.rate.acquire(first_read).await;
    let nodes = ctl.nodes.current();
    let node = ctl.placement.reader(&nodes).ok_or(ControlError::NoNodes)?;
    let (b, k) = (&f.loc.0, &f.loc.1);
    let r = node.read(b, k, Span::Suffix(first_read), None).await?;
    let mut warmed = r.bytes.len() as u64;
    let tail: &[u8; 8] = r
        .bytes
        .get(r.bytes.len().saturating_sub(8)..)
        .and_then(|t| t.try_into().ok())
        .ok_or_else(|| bad("file shorter than a Parquet footer".into()))?;
    let meta_len = FooterTail::try_from(*tail)
        .map_err(|e| bad(e.to_string()))?
        .metadata_length() as u64;
    let need = meta_len + 8;
    let bytes = if need <= r.bytes.len() as u64 {
        r.bytes
            .slice(r.bytes.len() - need as usize..r.bytes.len() - 8)
    } else {
        ctl.rate.acquire(need).await;
        let again = node.read(b, k, Span::Suffix(need), None).await?;
        warmed += need;
        again.bytes.slice(..again.bytes.len().saturating_sub(8))
    };
    let span = Span::Suffix(need.max(first_read));
    warm_others(ctl, &f.loc, span, None).await;
    let md = ParquetMetaDataReader::decode_metadata(&bytes).map_err(|e| bad(e.to_string()))?;
    let mut chunks: Vec<Chunk> = md
        .row_groups()
        .iter()
        .flat_map(|rg| rg.columns().iter())
        .map(|c| {
            let (start, len) = c.byte_range();
            Chunk {
                column: Arc::from(c.column_path().string()),
                start,
                len,
            }
        })
        .collect();
    chunks.sort_by_key(|c| c.start);
    progress(ctl, table, 0, 1, warmed);
    Ok(FileInfo {
        table: Arc::from(table),
        partition: Arc::from(f.partition.as_str()),
        size: f.size,
        chunks,
    })
}
