"""How long ``dbtester history`` takes over 1,000 runs, and its peak memory.

    python benchmarks/history_scale.py [--runs 1000] [--source DIR] [--keep DIR]
        [--bucket s3://BUCKET/PREFIX]

Generates a history of N synthetic runs from a real run's files (default: the
version-1 fixture, tests/fixtures/results-v1): each a copy of its summary and
Parquet files under a new run id, a day apart, with its figures scaled by a
few percent of noise through the results records. Then runs
``dbtester history DIR`` in a fresh process and prints the wall time and the
peak RSS (``ru_maxrss`` of that child). With ``--bucket`` it also uploads the
history there (endpoint from ``AWS_ENDPOINT_URL``) and times the query from
the bucket with both readers: ``fetch`` (fsspec downloads the figures files
concurrently, DuckDB queries them in memory: the default) and ``duckdb``
(DuckDB opens each file through the fsspec file system registered with it).
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dbtester.analyze.stats import METRICS
from dbtester.results import DatabaseSummary, ResultsDir, RunResults, RunSummary

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "results-v1"
DAY = 86400.0


def _scaled(database: DatabaseSummary, factor: float) -> DatabaseSummary:
    """Slower by ``factor`` (1.5: latencies x1.5, throughput /1.5); resources too."""

    def scale(figures: dict[str, float | int | str | None]) -> dict[str, float | int | str | None]:
        out = dict(figures)
        for row, value in figures.items():
            metric = METRICS.get(row)
            if metric is None or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            out[row] = value / factor if metric.better == "higher" else value * factor
        return out

    return database.model_copy(
        update={
            "figures": scale(database.figures),
            "trial_figures": tuple(scale(f) for f in database.trial_figures),
        }
    )


def derive_run(
    results: RunResults,
    summary: RunSummary,
    target: Path,
    *,
    run_id: str,
    started_unix: float,
    factor: float = 1.0,
    copy_files: bool = True,
) -> RunSummary:
    """A run at ``target`` derived from ``results`` (loaded) and its ``summary``:
    new run id and start, figures scaled by ``factor`` (>1 is worse). With
    ``copy_files`` every file is copied (a directory ``publish`` accepts),
    else only config.yaml; result.json and the Parquet files are rewritten."""
    if copy_files:
        shutil.copytree(results.directory, target, ignore=shutil.ignore_patterns("parquet"))
    else:
        target.mkdir(parents=True)
        shutil.copy2(ResultsDir(results.directory).layout.config, ResultsDir(target).layout.config)
    derived = summary.model_copy(
        update={
            "run_id": run_id,
            "started_unix": started_unix,
            "databases": tuple(_scaled(db, factor) for db in summary.databases),
        }
    )
    store = ResultsDir(target)
    store.write_summary(derived)
    store.write_columnar(results, derived)
    return derived


def generate(source: Path, target: Path, runs: int, *, seed: int = 16) -> None:
    """``runs`` runs below ``target``, one a day, each within ±3% of ``source``."""
    store = ResultsDir(source)
    results, summary = store.load(), store.read_summary()
    if summary is None:
        raise SystemExit(f"{source} has no result.json: run `dbtester analyze` on it first")
    noise = random.Random(seed)
    start = summary.started_unix - runs * DAY
    for k in range(runs):
        derive_run(
            results,
            summary,
            target / f"run-{k:05d}",
            run_id=f"synthetic-{k:05d}",
            started_unix=start + k * DAY,
            factor=1 + noise.uniform(-0.03, 0.03),
            copy_files=False,
        )


# The child times its imports and the query (finding the runs, reading their
# Parquet with DuckDB, the table) apart, and reports its own peak RSS.
_CHILD = """
import resource, sys, time
started = time.perf_counter()
from dbtester.compare import check_metrics
from dbtester.history import load_history, open_source
from dbtester.history.output import render_table
imported = time.perf_counter()
found = load_history(open_source(sys.argv[1]), reader=sys.argv[3])
table = render_table(found, check_metrics(()))
done = time.perf_counter()
assert len({r.run_id for r in found.runs}) == int(sys.argv[2]), len(found.runs)
print(imported - started, done - imported, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@dataclass(frozen=True)
class Timing:
    imports_s: float  # Python and the libraries, before the query
    query_s: float  # find the runs, read them with DuckDB, render the table
    wall_s: float  # the whole process
    peak_mib: float  # its peak RSS

    def line(self, where: str, runs: int) -> str:
        return (
            f"{where}: {runs} runs queried in {self.query_s:.2f} s"
            f" (process {self.wall_s:.2f} s, of which imports {self.imports_s:.2f} s),"
            f" peak RSS {self.peak_mib:.0f} MiB"
        )


def timed_history(source: str, runs: int, reader: str = "fetch") -> Timing:
    """`dbtester history SOURCE`'s work in a fresh process, timed."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, source, str(runs), reader],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    imports, query, kib = done.stdout.split()
    return Timing(float(imports), float(query), wall, int(kib) / 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--source", type=Path, default=FIXTURE)
    parser.add_argument("--keep", type=Path, help="generate the history here and keep it")
    parser.add_argument("--bucket", help="also upload it to s3://BUCKET/PREFIX and query there")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="history-scale-") as scratch:
        source = Path(scratch) / "source"
        shutil.copytree(args.source, source)
        subprocess.run(
            [sys.executable, "-m", "dbtester", "analyze", str(source)],
            capture_output=True,
            check=True,
        )
        history = args.keep or Path(scratch) / "history"
        if args.keep and args.keep.exists():
            print(f"reusing the history in {history}")
        else:
            started = time.perf_counter()
            generate(source, history, args.runs)
            took = time.perf_counter() - started
            print(f"generated {args.runs} runs in {took:.1f} s: {history}")
        print(timed_history(str(history), args.runs).line("local", args.runs))
        if args.bucket:
            import fsspec  # type: ignore[import-untyped]

            fs = fsspec.filesystem("s3")
            prefix = args.bucket.removeprefix("s3://")
            if fs.exists(prefix):
                print(f"reusing the history in {args.bucket}")
            else:
                fs.put(str(history), prefix, recursive=True)
            for reader in ("fetch", "duckdb"):
                timing = timed_history(args.bucket, args.runs, reader)
                print(timing.line(f"bucket, reader {reader}", args.runs))


if __name__ == "__main__":
    main()
