"""Ingest benchmark: `realm ingest` against wikiextractor 3.1.0 on the same dump, 2 processes each.

The gensim enwiki slice (206 pages) is replicated with fresh page ids to >= 20,000 pages (1x) and
4x that; both tools run as the commands a user would type, end to end, in this one run. We report
pages/s, the ratio realm/wikiextractor, peak RSS of each process tree, and how clean each output
is (markup left per million output characters). Results: bench/results/ingest.json.

    .venv/bin/python bench/ingest.py [--pages 20000] [--scales 1 4]
"""

from __future__ import annotations

import argparse
import bz2
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from peers import write_result  # noqa: E402

from realm_core.config import data_dir

GENSIM = "wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
WORK = ROOT / "bench" / ".work"
RESIDUE = ["{{", "}}", "[[", "]]", "{|", "|}", "<ref", "&nbsp;", "style=", "'''", "colspan", "<!--"]


def replicated_dump(copies: int, out: Path, first_pages: int | None = None) -> int:
    """Write the slice (or its first `first_pages` pages) `copies` times with shifted page ids;
    returns the page count."""
    xml = bz2.decompress((data_dir() / GENSIM).read_bytes()).decode()
    head, rest = xml.split("<page>", 1)
    body, tail = ("<page>" + rest).rsplit("</page>", 1)
    body += "</page>"
    if first_pages is not None:
        body = "".join(p + "</page>" for p in body.split("</page>")[:first_pages])
    page_id = re.compile(r"(<page>\s*<title>[^<]*</title>\s*<ns>\d+</ns>\s*<id>)(\d+)(</id>)")
    n_pages = body.count("<page>")
    with bz2.open(out, "wt", compresslevel=1) as f:
        f.write(head)
        for k in range(copies):
            f.write(page_id.sub(lambda m, k=k: f"{m[1]}{int(m[2]) + k * 10_000_000}{m[3]}", body))
        f.write(tail)
    return n_pages * copies


def tree_rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants, from /proc."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+)", status)[1]) if "VmRSS" in status else 0
            for task in Path(f"/proc/{p}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss_kb(proc.pid))
        time.sleep(0.05)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{proc.stderr.read() if proc.stderr else ''}")
    return seconds, peak


def residue_per_million(texts: list[str]) -> dict[str, float]:
    total = sum(len(t) for t in texts) or 1
    return {tok: round(sum(t.count(tok) for t in texts) * 1e6 / total, 2) for tok in RESIDUE}


def realm_texts(root: Path) -> list[str]:
    import pyarrow.parquet as pq

    return [t for p in sorted(root.rglob("documents/part-*.parquet"))
            for t in pq.read_table(p, columns=["text"]).column("text").to_pylist()]


def wikiextractor_texts(out: Path) -> list[str]:
    docs = []
    for f in sorted(out.rglob("wiki_*")):
        docs += re.findall(r"<doc [^>]*>\n(.*?)</doc>", f.read_text(), re.DOTALL)
    return docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=20_000, help="pages at scale 1 (at least)")
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args()
    if not (data_dir() / GENSIM).is_file():
        raise SystemExit(f"needs {data_dir() / GENSIM} (set REALM_DATA_DIR)")
    WORK.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    per_copy = 206
    rows = []
    for scale in args.scales:
        copies = -(-args.pages * scale // per_copy)
        dump = WORK / f"enwiki-x{copies}.xml.bz2"
        pages = replicated_dump(copies, dump)
        print(f"scale {scale}: {pages} pages, {dump.stat().st_size / 1e6:.1f} MB bz2", flush=True)
        realm_root = WORK / f"realm-x{copies}"
        we_out = WORK / f"we-x{copies}"
        subprocess.run(["rm", "-rf", str(realm_root), str(we_out)], check=True)
        realm_s, realm_rss = timed(
            [sys.executable, "-m", "flows.cli", "ingest", "--source", f"wikipedia:{dump}",
             "--workers", str(args.processes), "--root", str(realm_root), "--force"], env)
        we_s, we_rss = timed(
            [sys.executable, "-m", "wikiextractor.WikiExtractor", "--processes", str(args.processes),
             "-q", "-o", str(we_out), str(dump)], env)
        realm_docs, we_docs = realm_texts(realm_root), wikiextractor_texts(we_out)
        if not realm_docs or not we_docs:
            raise SystemExit(f"an output is empty: realm {len(realm_docs)}, wikiextractor {len(we_docs)}")
        row = {
            "scale": scale, "pages": pages, "dump_mb": round(dump.stat().st_size / 1e6, 1),
            "realm": {"seconds": round(realm_s, 2), "pages_per_s": round(pages / realm_s, 1),
                      "peak_rss_mb": round(realm_rss / 1024, 1), "documents": len(realm_docs),
                      "markup_per_million_chars": residue_per_million(realm_docs)},
            "wikiextractor": {"seconds": round(we_s, 2), "pages_per_s": round(pages / we_s, 1),
                              "peak_rss_mb": round(we_rss / 1024, 1), "documents": len(we_docs),
                              "markup_per_million_chars": residue_per_million(we_docs)},
            "ratio_pages_per_s": round(we_s / realm_s, 2),
        }
        rows.append(row)
        r, w = row["realm"], row["wikiextractor"]
        print(f"  realm         {r['pages_per_s']:>8.1f} pages/s  peak RSS {r['peak_rss_mb']:>7.1f} MB  "
              f"markup/M chars {sum(r['markup_per_million_chars'].values()):.1f}")
        print(f"  wikiextractor {w['pages_per_s']:>8.1f} pages/s  peak RSS {w['peak_rss_mb']:>7.1f} MB  "
              f"markup/M chars {sum(w['markup_per_million_chars'].values()):.1f}")
        print(f"  ratio realm/wikiextractor: {row['ratio_pages_per_s']:.2f}x", flush=True)
    result = {"benchmark": "ingest", "peer": "wikiextractor 3.1.0", "processes": args.processes,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "runs": rows}
    write_result("ingest", result)


if __name__ == "__main__":
    main()
