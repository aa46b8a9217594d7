"""A conforming worker: two idempotent commits (an append, then an overwrite of a summary)."""
import pyarrow as pa


def worker(ctx):
    ctx.append(ctx.output_tables[0], pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                                               "event": pa.array([ctx.trigger["id"]] * 3)}))
    ctx.overwrite(ctx.output_tables[1], pa.table({"rows": pa.array([3], pa.int64())}))
