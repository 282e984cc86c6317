"""`python -m bench [--chunks N] [--seconds S] [--only B1,B3]`: every benchmark in order, each in
its own process (B1 builds the corpus B2..B7 use; B8 and B9 build their own). `make bench` runs
this."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench import common

BENCHES = {
    "B1": ("bench.b1_ingest", ["--chunks"]),
    "B2": ("bench.b2_search", ["--seconds"]),
    "B3": ("bench.b3_recall", []),
    "B4": ("bench.b4_switch", []),
    "B5": ("bench.b5_relay", []),
    "B6": ("bench.b6_incremental", []),
    "B7": ("bench.b7_churn", ["--seconds"]),
    "B8": ("bench.quality", []),  # its own database and corpus (bench/quality)
    "B8C2": ("bench.quality2", []),  # B8 on the second corpus (bench/quality2, canon_quality2)
    "B8X": ("bench.quality.cross_corpus", []),  # B8 and B8C2's dumps: each fit on the other corpus
    "B9": ("bench.b9_keyword_latency", ["--chunks"]),  # its own database (canon_keyword)
    "B10": ("bench.b10_reindex", ["--chunks"]),  # its own database (<CANON_BENCH_DB>_reindex)
    "B11": ("bench.b11_halfvec", []),  # real chunks embedded by `use` (canon_bench_b11)
    "B11M": ("bench.b11_generated", []),  # 1M generated vectors; ~1 h here, only with --only
    "B12": ("bench.b12_replica", []),  # a standby of the server, copied and stopped by it
    "B13": ("bench.b13_reconcile", []),  # 1M generated chunks (canon_reconcile); ~15 min here
    "B14": ("bench.storage", []),  # a moto S3 server against the local directory (canon_bench)
    "B15": ("bench.b15_filters", ["--chunks"]),  # B9's corpus kind, 100 chunks a document
    "B16": ("bench.b16_sync", []),  # a folder source of 10,000 files (canon_bench)
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=common.DEFAULT_CHUNKS)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--only", default=",".join(b for b in BENCHES if b != "B11M"))
    a = parser.parse_args()
    values = {"--chunks": str(a.chunks), "--seconds": str(a.seconds)}
    started = time.perf_counter()
    for bench_id in a.only.split(","):
        module, flags = BENCHES[bench_id.strip().upper()]
        argv = [sys.executable, "-m", module]
        for flag in flags:
            argv += [flag, values[flag]]
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=common.ROOT, check=True)
        print(f"[bench] {bench_id} took {time.perf_counter() - t0:.0f}s", flush=True)
    print(f"[bench] all took {time.perf_counter() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
