"""A pipeline worker the tests deploy: copies the source table's rows whose `ts` falls in the
run's logical interval (or the event's `data.from`/`data.to`) to the output table, with the SDK's
idempotent append. Each source row is tagged with the interval it was copied for."""
import datetime as dt

import pyarrow as pa
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan


def worker(ctx):
    iv = ctx.interval
    if iv is None:
        raise RuntimeError("this worker needs a logical interval")
    start, end = iv.start, iv.end
    rows = ctx.read(ctx.env["SOURCE"], And(GreaterThanOrEqual("ts", start.isoformat()),
                                             LessThan("ts", end.isoformat())))
    ctx.log.info("interval %s..%s: %d rows", start, end, rows.num_rows)
    if rows.num_rows == 0:
        return
    tag = pa.array([start.isoformat()] * rows.num_rows)
    out = pa.table({"id": rows["id"], "ts": rows["ts"], "interval_start": tag})
    ctx.append(ctx.output, out)
