//! A table's observable state for the conformance check: its current schema and its rows as a
//! sorted multiset of canonical text lines (the order of files and rows is not state).

use futures::TryStreamExt;
use iceberg::{Catalog, TableIdent};

use super::ConformError;

/// One table's schema and rows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TableState {
    /// `name: type [not null]` per field; empty when the table does not exist.
    pub schema: Vec<String>,
    /// Each row's values joined by ` | `, sorted.
    pub rows: Vec<String>,
    /// Whether the table exists.
    pub exists: bool,
}

/// Reads `ident`'s current state (its files read through the catalog's FileIO: through Floe).
pub async fn read(cat: &dyn Catalog, ident: &TableIdent) -> Result<TableState, ConformError> {
    let named = |e: iceberg::Error| ConformError::Catalog(format!("{ident}: {e}"));
    if !cat.table_exists(ident).await.map_err(named)? {
        return Ok(TableState::default());
    }
    let table = cat.load_table(ident).await.map_err(named)?;
    let schema = table
        .metadata()
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(|f| {
            let null = if f.required { " not null" } else { "" };
            format!("{}: {}{null}", f.name, f.field_type)
        })
        .collect();
    let mut rows = Vec::new();
    if table.metadata().current_snapshot().is_some() {
        let batches: Vec<arrow_array::RecordBatch> = table
            .scan()
            .select_all()
            .build()
            .map_err(named)?
            .to_arrow()
            .await
            .map_err(named)?
            .try_collect()
            .await
            .map_err(named)?;
        for b in &batches {
            rows.extend(lines(b).map_err(|e| ConformError::Catalog(format!("{ident}: {e}")))?);
        }
    }
    rows.sort();
    Ok(TableState {
        schema,
        rows,
        exists: true,
    })
}

/// The batch's rows as text, one line each.
fn lines(b: &arrow_array::RecordBatch) -> Result<Vec<String>, arrow_schema::ArrowError> {
    use arrow_cast::display::{ArrayFormatter, FormatOptions};
    let options = FormatOptions::default().with_null("NULL");
    let columns = b
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((0..b.num_rows())
        .map(|i| {
            columns
                .iter()
                .map(|f| f.value(i).to_string())
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .collect())
}

/// How `got` differs from `want`, in a few lines (None when equal).
pub fn diff(want: &TableState, got: &TableState) -> Option<String> {
    if want == got {
        return None;
    }
    if want.schema != got.schema {
        return Some(format!(
            "schema [{}] where the clean run has [{}]",
            got.schema.join(", "),
            want.schema.join(", ")
        ));
    }
    let (mut extra, mut missing) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < want.rows.len() || j < got.rows.len() {
        match (want.rows.get(i), got.rows.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a < b => {
                missing.push(a.clone());
                i += 1;
            }
            (Some(_), Some(b)) | (None, Some(b)) => {
                extra.push(b.clone());
                j += 1;
            }
            (Some(a), None) => {
                missing.push(a.clone());
                i += 1;
            }
            (None, None) => break,
        }
    }
    let sample = |v: &[String]| v.iter().take(3).cloned().collect::<Vec<_>>().join("; ");
    Some(format!(
        "{} rows where the clean run has {}: {} extra ({}), {} missing ({})",
        got.rows.len(),
        want.rows.len(),
        extra.len(),
        sample(&extra),
        missing.len(),
        sample(&missing)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(rows: &[&str]) -> TableState {
        TableState {
            schema: vec!["id: long".into()],
            rows: rows.iter().map(|r| (*r).to_owned()).collect(),
            exists: true,
        }
    }

    #[test]
    fn a_duplicated_row_is_reported_as_extra_and_equal_states_as_none() {
        assert_eq!(diff(&state(&["1", "2"]), &state(&["1", "2"])), None);
        let d = diff(&state(&["1", "2"]), &state(&["1", "1", "2"])).unwrap();
        assert!(
            d.starts_with("3 rows where the clean run has 2: 1 extra (1), 0 missing"),
            "{d}"
        );
        let d = diff(&state(&["1", "2"]), &state(&["2"])).unwrap();
        assert!(d.contains("0 extra (), 1 missing (1)"), "{d}");
    }
}
