"""A worker that is not idempotent: it appends with PyIceberg directly, no idempotency key, so
a replay appends its rows again."""
import pyarrow as pa


def worker(ctx):
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    cat = ctx.catalog
    name = ctx.output
    cat.create_namespace_if_not_exists(name.rsplit(".", 1)[0])
    tbl = cat.create_table_if_not_exists(name, schema=rows.schema)
    tbl.append(rows)
