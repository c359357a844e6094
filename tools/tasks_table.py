#!/usr/bin/env python3
"""The accuracy tables of recorded `gsrq tasks` runs as Markdown, computed from their answers in the run
store (not from the summaries): one table per task, a row per method, a column per context length,
each cell the mean score with its Wilson 95% interval and the number of samples; the methods' bits
and settings, the prompt format and the run's times below.

    python3 tools/tasks_table.py RUN [RUN ...] [--db runs.db] [--gsrq build/app/cli/gsrq]

Runs of one model and prefill mode can be given together (their cells side by side); exit 2 for a
run that is not a tasks run or a store that cannot be read.
"""
import argparse
import json
import math
import subprocess
import sys

from gsrqtools.paths import default_gsrq

Z = 1.959963984540054


def wilson(successes, n):
    """(p, lo, hi): Wilson's score interval at 95%, as the engine computes it (core/lm/context_tasks.h)."""
    if n <= 0:
        return math.nan, math.nan, math.nan
    p = successes / n
    z2 = Z * Z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return p, max(0.0, centre - half), min(1.0, centre + half)


def load(gsrq, db, run):
    cmd = [gsrq] + (["--db", db] if db else []) + ["runs", "show", str(run), "--json"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print(f"tasks_table.py: run {run}: {r.stderr.strip() or 'gsrq runs show failed'}", file=sys.stderr)
        sys.exit(2)
    j = json.loads(r.stdout)
    if j.get("kind") != "tasks":
        print(f"tasks_table.py: run {run} is a {j.get('kind')} run, not tasks", file=sys.stderr)
        sys.exit(2)
    return j


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=int)
    ap.add_argument("--db", default="")
    ap.add_argument("--gsrq", default=default_gsrq())
    a = ap.parse_args(argv)
    runs = [load(a.gsrq, a.db, r) for r in a.runs]
    tasks, contexts, methods = [], [], []
    cells = {}
    for run in runs:
        s = json.loads(run["settings_json"]) if isinstance(run.get("settings_json"), str) else run["settings"]
        for t in s["tasks"]:
            if t not in tasks:
                tasks.append(t)
        for c in s["context"]:
            if c not in contexts:
                contexts.append(c)
        for m in s["methods"]:
            if m not in methods:
                methods.append(m)
        for rec in run.get("samples", []):
            if not rec.get("key", "").startswith("answer/"):
                continue
            key = (rec["task"], rec["context"], rec["method"])
            n, total = cells.get(key, (0, 0.0))
            cells[key] = (n + 1, total + rec["score"])
    contexts.sort()
    out = []
    for t in tasks:
        if not any(k[0] == t for k in cells):
            out.append(f"\n**{t}**: no answer recorded yet")
            continue
        out.append(f"\n**{t}** (accuracy [Wilson 95% interval], samples)\n")
        out.append("| method | " + " | ".join(f"{c} tokens" for c in contexts) + " |")
        out.append("| --- |" + " --- |" * len(contexts))
        for m in methods:
            row = []
            for c in contexts:
                n, total = cells.get((t, c, m), (0, 0.0))
                if n == 0:
                    row.append("-")
                    continue
                p, lo, hi = wilson(total, n)
                row.append(f"{p:.2f} [{lo:.2f}, {hi:.2f}] n={n}")
            if any(x != "-" for x in row):
                out.append(f"| {m} | " + " | ".join(row) + " |")
    for run in runs:
        s = json.loads(run["settings_json"]) if isinstance(run.get("settings_json"), str) else run["settings"]
        summary = json.loads(run["summary_json"]) if isinstance(run.get("summary_json"), str) else run["summary"]
        out.append(f"\nRun {run['id']} ({run['status']}): {s['prefill']} prefill, seed {s['seed']}, depths "
                   f"{s['depths']}, started {run['started_at']}, finished {run.get('finished_at') or '-'}; "
                   f"{summary.get('prefill_seconds', 0):.0f} s of prefill and "
                   f"{summary.get('method_seconds', 0):.0f} s of the methods' caches, questions and answers in its "
                   f"last invocation.")
    print("\n".join(out).lstrip("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
