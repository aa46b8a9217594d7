"""The harness: ``python -m floe_worker FILE.py[:FUNCTION]`` (or ``floe-worker ...``), run by
floe-control once per trigger event. Reads the CloudEvent from stdin, builds the context, calls
the worker's function (default ``worker``) once, records the run's events in the run log, and
exits 0, or 1 with the error on stderr (floe-control retries by the deployment's policy)."""
from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import traceback

from .context import Context, stderr_logging
from .runlog import RunLog


def load_handler(spec: str):
    """``path/to/file.py[:function]`` or ``package.module[:function]``."""
    target, _, name = spec.partition(":")
    name = name or "worker"
    if target.endswith(".py"):
        mod_spec = importlib.util.spec_from_file_location("floe_user_worker", target)
        if mod_spec is None or mod_spec.loader is None:
            raise SystemExit(f"floe-worker: cannot load {target}")
        module = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target)
    handler = getattr(module, name, None)
    if not callable(handler):
        raise SystemExit(f"floe-worker: {target} has no function {name}(ctx)")
    return handler


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m floe_worker FILE.py[:FUNCTION]", file=sys.stderr)
        return 2
    stderr_logging()
    handler = load_handler(args[0])
    raw = sys.stdin.read()
    event = json.loads(raw) if raw.strip() else {}
    ctx = Context(event)
    ctx.run_log = RunLog.from_env(ctx)
    if ctx.run_log is not None:
        ctx.run_log.start()
    try:
        handler(ctx)
    except Exception:
        error = traceback.format_exc()
        print(error, file=sys.stderr)
        if ctx.run_log is not None:
            ctx.run_log.end(error)
        return 1
    if ctx.run_log is not None:
        ctx.run_log.end()
    # The last stdout line: what the run committed (floe-control conform compares the schemas).
    summary = [{"table": c.table, "sequence": c.sequence, "rows": c.rows,
                "snapshot_id": c.snapshot_id, "skipped": c.skipped, "schema": c.schema}
               for c in ctx.commits]
    print(json.dumps({"commits": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
