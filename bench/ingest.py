"""Ingest benchmark: `realm ingest` against wikiextractor 3.1.0 on the same dump, 2 processes each.

The gensim enwiki slice (206 pages) is replicated with fresh page ids to >= 20,000 pages (1x) and
4x that; both tools run as the commands a user would type, end to end, in this one run. We report
pages/s, the ratio realm/wikiextractor, peak RSS of each process tree, and how clean each output
is (markup left per million output characters). Results: bench/results/ingest.json.

`--leaks` alone ingests the demo preset's three Wikipedia dumps with `realm ingest` and counts the
markup left in its documents (per million characters, per kind), stored under `demo_corpus_leaks`
in the same results file: a quick check that cleaning leaks nothing on the whole demo corpus.

    .venv/bin/python bench/ingest.py [--pages 20000] [--scales 1 4]
    .venv/bin/python bench/ingest.py --leaks
"""

from __future__ import annotations

import argparse
import bz2
import functools
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from peers import write_result

from realm_core.config import data_dir

GENSIM = "wikipedia/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
WORK = ROOT / "bench" / ".work"
RESIDUE = ["{{", "}}", "[[", "]]", "{|", "|}", "<ref", "&nbsp;", "style=", "'''", "colspan", "<!--"]


def _shift_page_id(m: re.Match[str], by: int) -> str:
    return f"{m[1]}{int(m[2]) + by}{m[3]}"


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
            f.write(page_id.sub(functools.partial(_shift_page_id, by=k * 10_000_000), body))
        f.write(tail)
    return n_pages * copies


def tree_rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants, from /proc."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            rss = re.search(r"VmRSS:\s+(\d+)", status)
            total += int(rss[1]) if rss else 0
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


def demo_corpus_leaks() -> dict[str, Any]:
    """Markup left by `realm ingest` in the demo preset's Wikipedia documents."""
    import json

    from realm_core.config import load_config

    root = WORK / "demo-leaks"
    subprocess.run(["rm", "-rf", str(root)], check=True)
    wiki = [s.model_dump(mode="json") for s in load_config("demo").ingest.sources if s.kind == "wikipedia"]
    proc = subprocess.run([sys.executable, "-m", "flows.cli", "ingest", "--preset", "demo", "--root", str(root),
                           "--set", f"ingest.sources={json.dumps(wiki)}"], capture_output=True, text=True,
                          env=dict(os.environ, TOKENIZERS_PARALLELISM="false"))
    if proc.returncode != 0:
        raise SystemExit(f"realm ingest failed:\n{proc.stderr[-2000:]}")
    texts = realm_texts(root)
    leaks = residue_per_million(texts)
    return {"sources": [Path(s["path"]).name for s in wiki], "documents": len(texts),
            "chars": sum(len(t) for t in texts), "markup_per_million_chars": leaks,
            "total_per_million_chars": round(sum(leaks.values()), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=20_000, help="pages at scale 1 (at least)")
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--leaks", action="store_true", help="only the markup-leak count over the demo corpus")
    args = ap.parse_args()
    if args.leaks:
        import json

        from peers import RESULTS

        result = json.loads((RESULTS / "ingest.json").read_text()) if (RESULTS / "ingest.json").is_file() else {}
        result["demo_corpus_leaks"] = demo_corpus_leaks()
        print(f"demo corpus: {result['demo_corpus_leaks']['documents']} documents, markup/M chars "
              f"{result['demo_corpus_leaks']['total_per_million_chars']}")
        write_result("ingest", result)
        return
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
              "runs": rows, "demo_corpus_leaks": demo_corpus_leaks()}
    write_result("ingest", result)


if __name__ == "__main__":
    main()
