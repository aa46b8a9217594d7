"""A worker that drifts its schema: a replay (attempt 2 or later) writes an extra column."""
import pyarrow as pa


def worker(ctx):
    cols = {"id": pa.array([1, 2, 3], pa.int64())}
    if ctx.attempt > 1:
        cols["loaded_by"] = pa.array([f"attempt-{ctx.attempt}"] * 3)
    ctx.append(ctx.output, pa.table(cols))
