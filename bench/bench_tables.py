"""The product benchmarks' tables (bench/*.py), each rendered from its bench/results/<name>.json by
bench/readme_tables.py into the page that shows it."""

from __future__ import annotations

import json
from collections.abc import Callable

from render import ROOT, Result, interval, machine, minutes, stage_title

RESULTS = ROOT / "bench" / "results"


def ingest_table(result: Result) -> str:
    lines = ["| dump | tool | pages/s | ratio | peak RSS (MB) | documents | markup left / M chars |",
             "|---|---|---|---|---|---|---|"]
    for run in result["runs"]:
        for tool in ("realm", "wikiextractor"):
            r = run[tool]
            ratio = f"**{run['ratio_pages_per_s']:.2f}x**" if tool == "realm" else "1.00x"
            lines.append(f"| {run['scale']}x ({run['pages']:,} pages) | {tool} | "
                         f"{r['pages_per_s']:,.1f} | {ratio} | {r['peak_rss_mb']:,.0f} | "
                         f"{r['documents']:,} | {sum(r['markup_per_million_chars'].values()):.1f} |")
    return "\n".join(lines)


def spans_table(result: Result) -> str:
    raw, stage = result["raw"], result["stage"]
    lines = [f"| run ({result['blocks']:,} demo blocks, {result['sentences']:,} sentences, "
             f"n_process={result['n_process']}) | sentences/s | ratio | cores used |",
             "|---|---|---|---|",
             f"| raw `nlp.pipe` (peer) | {raw['sentences_per_s']:,.1f} | 1.00 | {raw['cores_used']:.2f} |",
             f"| mining stage | {stage['sentences_per_s']:,.1f} | **{result['ratio']:.3f}** | "
             f"{stage['cores_used']:.2f} |", "",
             "| hand-labelled spans | precision | recall | overlap recall | gold | predicted |",
             "|---|---|---|---|---|---|"]
    for kind in ("all", "entity", "date"):
        q = result["quality"][kind]
        lines.append(f"| {kind} | {q['precision']:.3f} | {q['recall']:.3f} | "
                     f"{q['overlap_recall']:.3f} | {q['gold']} | {q['predicted']} |")
    st = result["demo_stats"]
    labels = sorted(((k[6:], v) for k, v in st.items() if k.startswith("label:")), key=lambda x: -x[1])
    lines += ["", f"On those blocks: {st['spans']:,} spans, {st['spans_per_block']} per block; "
              f"{100 * st['share_sentences_with_span']:.1f}% of {st['sentences']:,} sentences hold "
              f"at least one; {st.get('empty_blocks', 0)} empty blocks. Labels: "
              + ", ".join(f"{k} {v:,}" for k, v in labels) + "."]
    return "\n".join(lines)


def mips_table(result: Result) -> str:
    lines = ["| corpus | index | queries/s | vs peer | recall@10 | build (s) | memory (MB) |",
             "|---|---|---|---|---|---|---|"]
    for run in result["runs"]:
        p = run["peer"]
        lines.append(f"| {run['n']:,} | torch matmul + topk (peer) | {p['qps']:,.0f} | 1.00x | 1.000 | - | "
                     f"{p['memory_mb']:,.0f} |")
        for ix in run["indexes"]:
            lines.append(f"| {run['n']:,} | faiss `{ix['factory']}` | {ix['qps']:,.0f} | "
                         f"**{ix['speedup_vs_peer']:.2f}x** | {ix['recall_at_10']:.3f} | "
                         f"{ix['build_s']:.1f} | {ix['memory_mb']:,.0f} |")
    return "\n".join(lines)


def embed_table(result: Result) -> str:
    return "\n".join([
        f"| {result['blocks']:,} demo blocks (mean {result['mean_tokens']} tokens), batch "
        f"{result['batch_size']} | blocks/s | ratio |", "|---|---|---|",
        f"| raw transformers forward, padded to 288 (peer) | {result['raw']['blocks_per_s']:.1f} | 1.00 |",
        f"| realm `embed_texts` (length-sorted batches) | {result['realm']['blocks_per_s']:.1f} | "
        f"**{result['ratio']:.2f}** |", *_parallel_rows(result.get("parallel"))])


def _parallel_rows(p: Result | None) -> list[str]:
    if not p:
        return []
    return ["", f"| `embed_blocks`, {p['blocks']:,} blocks in {p['shards']} shards | blocks/s | ratio |",
            "|---|---|---|",
            f"| 1 process x {p['one_process']['threads']} threads (peer) | "
            f"{p['one_process']['blocks_per_s']:.1f} | 1.00 |",
            f"| {p['workers']} worker processes x {p['parallel']['threads']} thread(s), start-up included | "
            f"{p['parallel']['blocks_per_s']:.1f} | **{p['ratio']:.2f}** |"]


def retrieval_table(result: Result) -> str:
    res = result["results"]
    datasets = sorted(res, key=lambda d: d != "squad-open")  # the headline set first
    metrics = res[datasets[0]]["metrics"]
    head = " | ".join(f"{d} {m}" for d in datasets for m in metrics)
    lines = [f"| retriever | {head} |", "|---|" + "---:|" * (len(datasets) * len(metrics))]
    for s in result["systems"]:
        name = s["name"] + (f" ({s['note']})" if s["note"] else "")
        cells = " | ".join(f"{res[d]['systems'][s['name']][m]:.3f}" for d in datasets for m in metrics)
        lines.append(f"| {name} | {cells} |")
    ict, ann = result["ict"], result["ann"]
    sizes = "; ".join(f"{d}: {res[d]['questions']:,} questions over {res[d]['blocks']:,} blocks"
                      for d in datasets)
    lines += ["", f"{sizes}. ICT: {ict['steps']} steps of {ict['batch_size']} on {ict['usable_blocks']:,} "
              f"blocks, in-batch loss {ict['first_loss']:.2f} -> {ict['final_loss']:.2f}, in-batch accuracy "
              f"{ict['final_in_batch_accuracy']:.2f}, {ict['train_seconds']:.0f} s of training.",
              "", f"Approximate search on the {ann['blocks']:,} real ICT block embeddings "
              f"({ann['queries']:,} block queries, recall@10 against exact search): "
              + ", ".join(f"`{a['factory']}` {a['recall_at_10']:.3f}" for a in ann["indexes"]) + "."]
    return "\n".join(lines)


def pretrain_step_table(result: Result) -> str:
    shapes = result["shapes"]
    names = list(shapes)
    lines = ["| step | " + " | ".join(
        f"{n} shapes: k={s['top_k']}, reader {s['reader_length']}, blocks {s['doc_length']}, queries "
        f"{s['query_length']}, {s['batch_size']} examples: seconds (overhead vs peer)" for n, s in shapes.items()) + " |",
        "|---|" + "---:|" * len(names),
        "| bare reader forward + backward on the same B x K inputs (peer) | "
        + " | ".join(f"{shapes[n]['bare_reader_step_s']:.2f} (-)" for n in names) + " |"]
    if all("unavoidable_step_s" in shapes[n] for n in names):
        lines.append("| compute a recompute step cannot avoid: bare reader + document encoder on the retrieved "
                     "blocks + query encoder, forward + backward (peer) | "
                     + " | ".join(f"{shapes[n]['unavoidable_step_s']:.2f} (-)" for n in names) + " |")
    for mode in ("recompute", "index"):
        lines.append(f"| REALM step, relevance `{mode}` | " + " | ".join(
            f"{shapes[n]['modes'][mode]['step_s']:.2f} (**{100 * shapes[n]['modes'][mode]['overhead']:+.0f}%**)"
            for n in names) + " |")
    if all("unavoidable_step_s" in shapes[n] for n in names):
        lines.append("| recompute step over the compute it cannot avoid (bound: +20%) | " + " | ".join(
            f"**{100 * shapes[n]['modes']['recompute']['overhead_vs_unavoidable']:+.0f}%**" for n in names) + " |")
    lines += ["", f"Median of {result['steps']} interleaved steps each, after a warm-up; {result['threads']} "
              f"threads on {result['machine']}."]
    return "\n".join(lines)


def scaling_table(result: Result) -> str:
    stages = list(result["runs"][0]["stages"])
    lines = ["| scale | pages | blocks | " + " | ".join(f"{s}: s (time/blocks ratio), peak MB" for s in stages) + " |",
             "|---|---:|---:|" + "---|" * len(stages)]
    for run in result["runs"]:
        cells = [f"{st['seconds']:.1f} ({st['time_ratio_per_block_ratio']:.2f}), {st['peak_rss_mb']:,.0f}"
                 for st in run["stages"].values()]
        lines.append(f"| {run['scale']}x | {run['pages']:,} | {run['counts']['blocks']:,} | " + " | ".join(cells) + " |")
    proj = result["projection"]
    fits = "; ".join(
        f"{k}: {f['startup_seconds']:.0f} s + {1000 * f['seconds_per_block']:.2f} ms/block (R² {f['r2']:.2f}) -> "
        + ("not projected (start-up and noise at these sizes)" if proj["hours_on_this_machine"][k] is None
           else f"**{proj['hours_on_this_machine'][k]:,.1f} h**")
        for k, f in proj["fit"].items())
    lines += ["", f"Time/blocks ratio: a stage's seconds over its 1x seconds, divided by the growth in blocks "
              f"(at most 1: no worse than linear). Projection to {proj['blocks']:,} blocks on this "
              f"{result['cores']}-core machine, from a least-squares line over the five scales: {fits}."]
    return "\n".join(lines)


def projection_table(result: Result) -> str:
    gpus = list(result["total"]["hours"])
    a = result["assumption"]
    lines = ["| stage (paper preset, BERT-base) | PFLOP | " + " | ".join(f"hours on {g} GPU{'s' if g != '1' else ''}"
                                                                        for g in gpus) + " |",
             "|---|---:|" + "---:|" * len(gpus)]
    for name, st in [*result["stages"].items(), ("**total**", result["total"])]:
        lines.append(f"| {name} | {st['pflop']:,.0f} | " + " | ".join(f"{st['hours'][g]:,.1f}" for g in gpus) + " |")
    sh = result["shapes"]
    lines += ["", f"Calculated, not measured: {result['blocks']:,} blocks of {result['block_wordpieces']} wordpieces; "
              f"a REALM step is {sh['batch']} examples x k={sh['top_k']} reader sequences of {sh['reader']} plus "
              f"{sh['top_k'] - 1} blocks of {sh['doc']} re-embedded with gradient and a query of {sh['query']}, "
              f"training = 3 forward passes (ICT in micro-batches: 4, the first without a graph); **assumed** {a['sustained_tflops']:,.0f} TFLOP/s sustained per GPU "
              f"({100 * a['utilization']:.0f}% of a {a['peak_tflops']:,.0f} TFLOP/s bf16 peak), perfect scaling "
              f"over GPUs, no time for data loading, search or checkpoints."]
    if "measured_on_gpu" in result:
        m = result["measured_on_gpu"]
        lines[-1] += (f" Measured on {m['device']} by bench/gpu.py: "
                      + ", ".join(f"{k} {v:,.1f} GPU-hours" for k, v in m["gpu_hours"].items()) + ".")
    return "\n".join(lines)


def gpu_table(result: Result) -> str:
    blocks = next(iter(result["shapes"].values()))["embedding"]["blocks"]
    lines = [f"| {result['device']}, torch {result['torch']} | blocks/s ({blocks:,} demo blocks) | ratio |",
             "|---|---:|---:|"]
    for shape, r in result["shapes"].items():
        e = r["embedding"]
        lines += [f"| {shape}: {run} | {x['blocks_per_s']:,.0f} | {x['ratio']:.2f}x |" for run, x in e["runs"].items()]
        if "tokenize_blocks_per_s" in e:
            pool = " with its thread pool" if "tokenize_one_thread_blocks_per_s" in e else ""
            lines.append(f"| {shape}: the tokeniser alone{pool} (host, no GPU) | {e['tokenize_blocks_per_s']:,.0f} | |")
        if "tokenize_one_thread_blocks_per_s" in e:
            lines.append(f"| {shape}: the tokeniser alone on one thread (host, no GPU) | "
                         f"{e['tokenize_one_thread_blocks_per_s']:,.0f} | |")
    lines += ["", "| REALM step (bf16, k=8, dropout 0.1) | examples | step, cuDNN attention (s) | step, cuDNN attention "
              "left out (s) | bare reader (s) | unavoidable (s) | cuDNN step vs unavoidable | step without cuDNN vs "
              "unavoidable | CPU: search + batching (s) | peak GPU memory (GB) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for shape, r in result["shapes"].items():
        st = r["pretrain_step"]
        # before 29769a0 the script's own step used cuDNN attention and timed the other as its variant
        if "realm_step_with_cudnn_attention_s" in st:
            with_cudnn, without = st["realm_step_with_cudnn_attention_s"], st["realm_step_s"]
        else:
            with_cudnn, without = st["realm_step_s"], st["realm_step_without_cudnn_attention_s"]
        u = st["unavoidable_step_s"]
        lines.append(f"| {shape}, reader {st['reader_length']}, blocks {st['doc_length']} | {st['examples_per_step']} | "
                     f"{with_cudnn:.3f} | {without:.3f} | {st['bare_reader_step_s']:.3f} | {u:.3f} | "
                     f"{100 * (with_cudnn / u - 1):+.0f}% | {100 * (without / u - 1):+.0f}% | "
                     f"{st['host_search_s'] + st['host_batching_s']:.3f} | {st['peak_memory_gb']:.1f} |")
    return "\n".join(lines)


def gpu_ict_table(result: Result) -> str:
    lines = [f"| ICT step, {result['device']} (the warm-start loop, dropout 0.1) | batch x block | micro-batch | "
             "the loop's step (s) | examples/s | its GPU step alone, batches on the device (s) | gradient "
             "accumulation, 3 passes (s) | GPU step vs accumulation | tokenising a batch, HF call: pool / one thread (s) "
             "| peak GPU memory (GB) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for shape, r in result["shapes"].items():
        t = r["ict_step"]
        lines.append(f"| {shape}, {t['precision']} | {t['batch']:,} x {t['block_length']} | "
                     f"{t['micro_batch'] or 'whole batch'} | {t['step_s']:.3f} | {t['examples_per_s']:,.0f} | "
                     f"{t['step_alone_s']:.3f} | {t['accumulation_step_s']:.3f} | "
                     f"{t['step_alone_s'] / t['accumulation_step_s']:.2f}x | "
                     f"{t['tokenize_s']:.3f} / {t['tokenize_one_thread_s']:.3f} | {t['peak_memory_gb']:.1f} |")
    return "\n".join(lines)


def ict_tokenise_table(result: Result) -> str:
    lines = [f"| tokenising one ICT batch on {result['cpus']} CPU cores (pool on, median of {result['repeats']}) | "
             "HF tokeniser call (peer, s) | `PaddedBatches` (s) | speed-up | identical ids and masks |",
             "|---|---:|---:|---:|---|"]
    for shape, r in result["shapes"].items():
        lines.append(f"| {shape}: {r['batch']:,} x {r['block_length']} | {r['hf_call_s (peer)']:.3f} | "
                     f"{r['padded_batches_s']:.3f} | {r['speedup']:.2f}x | {'yes' if r['identical_ids_and_masks'] else 'no'} |")
    return "\n".join(lines)


def cpu_precision_table(result: Result) -> str:
    m, t = result["machine"], result["span_reader_train_step"]
    rounds = (f"median of {result['rounds']} interleaved rounds" if result["rounds"] > 1
              else "one round, fp32 first")
    lines = [f"| {m['cpu']}, {m['threads']} threads (native bf16: {'yes' if m['native_bf16'] else 'no'}; "
             f"`auto` -> {m['auto_resolves_to']}); {rounds} | "
             "fp32 (peer) | bf16 autocast | bf16 / fp32 | fp32 vs bf16 outputs |", "|---|---:|---:|---:|---|"]
    for length, r in result["forward"].items():
        lines.append(f"| MiniLM forward, {result['batch']} x {length} (seq/s) | {r['fp32_seq_per_s']:.1f} | "
                     f"{r['bf16_seq_per_s']:.1f} | {r['bf16_vs_fp32']:.2f}x | min cosine {r['min_cosine_fp32_bf16']:.5f} |")
    lines.append(f"| span reader training step, {t['rows']} x {t['length']} (s) | {t['fp32_step_s']:.3f} | "
                 f"{t['bf16_step_s']:.3f} | {t['bf16_vs_fp32']:.2f}x | span scores within {t['max_abs_span_score_diff']:.3f} |")
    return "\n".join(lines)


def startup_table(result: Result) -> str:
    lines = [f"| command (median of {result['rounds']} interleaved rounds, {result['cpus']} cores) | bytecode written "
             "at install (s) | no bytecode, peer (s) | peer / bytecode |", "|---|---:|---:|---:|"]
    for name, c in result["commands"].items():
        lines.append(f"| `{name}` | {c['bytecode_s']:.2f} | {c['no_bytecode_s']:.2f} | {c['speedup']:.2f}x |")
    return "\n".join(lines)


def ask_table(result: Result) -> str:
    """`realm ask --questions` against the reading it replaced, in the same run (bench/ask.py)."""
    today, shipped = result["runs"]["today"], result["runs"]["shipped"]
    p = result["paired"]["EM"]

    def setting(run: Result) -> str:
        precision = run["precision"]
        if precision == "auto":  # bf16 where the CPU computes it natively (resolve_precision)
            native = {"avx512_bf16", "amx_bf16"} & set(result["cpu"]["flags"])
            precision = f"auto ({'bf16' if native else 'fp32'} on this CPU)"
        chunks = ("one forward a batch, padded to its longest row" if run["reader_tokens"] >= 10**8
                  else f"rows longest first, {run['reader_tokens']:,} padded wordpieces a forward")
        return f"{precision}, {run['batch_size']} questions a batch, {chunks}"

    lines = [f"| {result['system']} + reader, {result['questions']:,} SQuAD-open test questions, top "
             f"{result['top_k']} | questions/s | EM (%) |", "|---|---:|---:|",
             f"| peer, the reading before: {setting(today)} | {today['questions_per_s']:.2f} | {100 * today['EM']:.1f} |",
             f"| as shipped: {setting(shipped)} | {shipped['questions_per_s']:.2f} | {100 * shipped['EM']:.1f} |",
             "", f"As shipped / peer: **{result['speedup']:.2f}x** questions per second; EM {interval(p['delta'], p['ci95'])} "
             f"points (paired, 95% bootstrap interval over questions), McNemar p {p['mcnemar_p']:.2g}; "
             f"{result['answers_changed']} of {result['questions']:,} answers changed. {result['cpu']['model']} "
             f"({result['cpu']['cores']} cores; {', '.join(result['cpu']['flags']) or 'no native bf16'}), "
             f"{result['threads']} threads; the whole benchmark {minutes(result['wall_seconds'])}."]
    return "\n".join(lines)


def add_memory_table(result: Result) -> str:
    """`realm add`'s peak memory against the same add of a file ten times smaller (bench/add_memory.py)."""
    lines = [f"| JSONL added ({result['preset']} store) | documents | blocks added | peak resident (MB) | blocks/s |",
             "|---|---:|---:|---:|---:|"]
    for s in result["sizes"]:
        lines.append(f"| {s['input_mb']:g} MB | {s['documents']:,} | {s['blocks_added']:,} | {s['peak_rss_mb']:,.0f} "
                     f"| {s['blocks_per_s']:.1f} |")
    sizes = result["sizes"]
    ratio = sizes[-1]["input_mb"] / sizes[0]["input_mb"]
    lines += ["", f"Peak resident memory of the {sizes[-1]['input_mb']:g} MB add over the {sizes[0]['input_mb']:g} MB "
              f"one (the peer, {ratio:g}x less input): **{result['peak_ratio_largest_over_smallest']:.2f}x**; "
              f"{result['cores']} cores, {result['machine']}, the whole benchmark {minutes(result['wall_seconds'])}."]
    return "\n".join(lines)


def serve_table(result: Result) -> str:
    s, p, r = result["service"], result["peers"], result["ratios"]
    lines = [f"| {result['queries']} SQuAD-open dev questions, k={result['k']}, index v{result['index_version']} "
             f"({p['vectors'][0]:,} x {p['vectors'][1]}) | p50 (ms) | p99 (ms) | service / peer (p50) |",
             "|---|---|---|---|",
             f"| `GET /search?retriever=bm25` (HTTP) | {s['bm25']['p50_ms']:,.1f} | {s['bm25']['p99_ms']:,.1f} | "
             f"{r['bm25_p50_vs_bm25s']:.2f}x |",
             f"| peer: bm25s `retrieve` in process | {p['bm25s']['p50_ms']:,.2f} | {p['bm25s']['p99_ms']:,.2f} | 1.00x |",
             f"| `GET /search` dense, current index (HTTP) | {s['dense']['p50_ms']:,.1f} | {s['dense']['p99_ms']:,.1f} | "
             f"{r['dense_p50_vs_encode_matmul_topk']:.2f}x / {r['dense_p50_vs_matmul_topk']:.0f}x |",
             f"| peer: query encoder + torch matmul + topk | {p['encode_matmul_topk']['p50_ms']:,.2f} | "
             f"{p['encode_matmul_topk']['p99_ms']:,.2f} | 1.00x |",
             f"| peer: torch matmul + topk alone | {p['matmul_topk']['p50_ms']:,.3f} | {p['matmul_topk']['p99_ms']:,.3f} | - |",
             f"| `GET /ask` ({result['ask_system']}, {result['asks']} questions) | {s['ask']['p50_ms']:,.0f} | "
             f"{s['ask']['p99_ms']:,.0f} | - |", "",
             "| 8 concurrent clients | seconds | requests | req/s | errors | p50 (ms) | p99 (ms) |",
             "|---|---|---|---|---|---|---|"]
    for name, c in result["concurrent"].items():
        lat = c["latency"] or {"p50_ms": float("nan"), "p99_ms": float("nan")}
        lines.append(f"| {name.replace('_', ' ')} | {c['seconds']:.0f} | {c['requests']:,} | {c['requests_per_s']:.1f} | "
                     f"{c['errors']} | {lat['p50_ms']:,.0f} | {lat['p99_ms']:,.0f} |")
    t = result["targets"]
    lines += ["", f"Targets: dense search p50 <= {t['dense_p50_ms_max']} ms: "
              f"{'met' if t['dense_p50_met'] else 'missed'}; ask p50 <= {t['ask_p50_ms_max']} ms: "
              f"{'met' if t['ask_p50_met'] else 'missed'}; no failed request under load: "
              f"{'met' if t['zero_errors'] else 'missed'}."]
    return "\n".join(lines)


def _rebuild_floor(eq: Result) -> str:
    """The encoders' own reproducibility beside the incremental-vs-full comparison, where the
    benchmark measured it: the full re-index against the same blocks embedded in other batches."""
    floor = eq.get("rebuild_against_rebuild")
    if floor is None:
        return ""
    return (f"; the encoders in {eq['precision']}, where the full re-index against the same blocks embedded "
            f"again in other batches gives identical ids for {100 * floor['ids_identical_fraction']:.1f}% of "
            f"queries, largest score difference {floor['max_score_difference']:.1e}")


def knowledge_table(result: Result) -> str:
    """The knowledge corpus grown without training (bench/knowledge.py): what `realm add` costs
    against a full re-index in the same run, whether the incremental index equals the rebuilt one,
    and what the demo system answers about articles before and after they are added."""
    a, eq = result["added_articles"], result["incremental_equals_full"]
    lo, hi = a["em_after_minus_test_ci95"]
    served = result.get("service")  # the same adds in one running service, where measured
    rows = [("one SQuAD article", result["one_article_blocks"], "add_one_article_s", ""),
            ("10% more blocks (one article and Wikipedia articles)", result["ten_percent_blocks"],
             "add_ten_percent_s", "**"),
            (f"peer: full re-index (`--reembed`, {result['encoders']} encoder(s))", result["corpus_blocks"],
             "full_reindex_s", "")]

    def cost(r: Result, key: str, bold: str) -> str:
        # the 10% row's share as the benchmark stored it (from unrounded seconds), the others' from the seconds
        stored = r.get("ten_percent_over_full") if key == "add_ten_percent_s" else None
        share = 100 * (stored if stored is not None else r[key] / r["full_reindex_s"])
        return f"{r[key]:.1f} | {bold}{share:.1f}%{bold}"

    if served is None:
        lines = ["| `realm add` on the demo system | blocks | wall seconds | of a full re-index |", "|---|---:|---:|---:|"]
        lines += [f"| {what} | {blocks:,} | {cost(result, key, bold)} |" for what, blocks, key, bold in rows]
    else:
        lines = ["| on the demo system | blocks | `realm add` command: s | of its full re-index | running service "
                 "(POST /documents): s | of its full re-index |", "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {what} | {blocks:,} | {cost(result, key, bold)} | {cost(served, key, bold)} |"
                  for what, blocks, key, bold in rows]
        lines += ["", "A command pays its start (Python, torch and transformers imported, the encoders loaded) at "
                  "every add; the service (`realm serve-qa --allow-add`) paid it once, before its first request, "
                  "and each of its rows is one request to it, the full re-index (`\"reembed\": true`) included."]
    lines += [
             "",
             f"Incremental index against the full re-index, the same blocks searched by {eq['queries']:,} "
             f"SQuAD-open questions (flat index, top 10): {'equal' if eq['equal'] else 'NOT equal'} (identical ids "
             f"for {100 * eq['ids_identical_fraction']:.1f}% of queries, largest score difference "
             f"{eq['max_score_difference']:.1e}){_rebuild_floor(eq)}.",
             "",
             f"| {a['system']} + reader, SQuAD questions | questions | EM (%) |", "|---|---:|---:|",
             f"| about {' and '.join(a['articles'])}, before `realm add` | {a['questions']} | {100 * a['em_before']:.1f} |",
             f"| the same questions after `realm add` | {a['questions']} | **{100 * a['em_after']:.1f}** |",
             f"| the same questions, the articles in the corpus from the start (the demo's) | {a['questions']} | "
             f"{100 * a['test_em_same_system']:.1f} |",
             f"| the same system on {', '.join(a['other_test_articles'])}, always in its corpus | "
             f"{a['other_test_questions']} | {100 * a['other_test_em']:.1f} |",
             "",
             f"Added after `realm add` minus present from the start, the same {a['questions']} questions: "
             f"{100 * a['em_after_minus_test']:+.1f} points [{100 * lo:+.1f}, {100 * hi:+.1f}] (95% paired "
             f"bootstrap over questions; McNemar p={a['em_after_minus_test_mcnemar_p']:.2g}; "
             f"{a['answers_changed']} questions answered differently). "
             f"{result['cpu']['model']} ({result['cpu']['cores']} cores); the whole benchmark "
             f"{minutes(result['wall_seconds'])}."]
    return "\n".join(lines)


# the share of the CPU other processes may use during a demo whose time still counts as quiet
QUIET_SHARE = 0.05


def demo_table(result: Result) -> str:
    """`make demo`'s own record (bench/results/demo.json, written by its summary step): each
    stage's seconds, the whole run, what its systems answer on SQuAD-open test."""
    peaks = result.get("stages_peak_rss_mb")  # records since each stage's peak memory was kept
    if peaks:
        lines = ["| stage | seconds | peak resident memory of the process (GiB) |", "|---|---:|---:|"]
        for name, seconds in result["stages"].items():
            peak = peaks.get(name)
            lines.append(f"| {stage_title(name)} | {minutes(seconds)} | {'-' if peak is None else f'{peak / 1024:.2f}'} |")
        lines.append(f"| **the whole run, to its summary** | **{minutes(result['wall_seconds'])}** | "
                     f"**{result['peak_rss_mb'] / 1024:.2f}** |")
    else:
        lines = ["| stage | seconds |", "|---|---:|"]
        for name, seconds in result["stages"].items():
            lines.append(f"| {stage_title(name)} | {minutes(seconds)} |")
        lines.append(f"| **the whole run, to its summary** | **{minutes(result['wall_seconds'])}** |")
    ems = " | ".join(f"{name} {100 * em:.1f}" for name, em in result["squad_open_em"].items())
    reads = result["reads"]
    done = "every stage computed" if result["all_computed"] else "some stages were cache hits: not a timing of the demo"
    if (other := result.get("other_cpu_share")) is not None and other > QUIET_SHARE:
        done += f"; other processes used {100 * other:.0f}% of the CPU meanwhile: not a quiet timing"
    lines += ["", f"{done}; {machine(result)}; {result['date']}."]
    if ems:
        lines += ["", f"SQuAD-open test EM (%): {ems.replace(' | ', '; ')}."]
    if reads:
        lines[-1] += (f" The evaluation read {reads['pairs_read']:,} reader rows and reused "
                      f"{reads['pairs_reused']:,} that another system had read.")
    return "\n".join(lines)


def demo_summary(result: Result) -> str:
    """README's lines from the demo's own record: its time, the machine, the corpus and store."""
    c = result["corpus"]
    other = result.get("other_cpu_share")
    beside = ("" if other is None or other <= QUIET_SHARE
              else f", with other processes using {100 * other:.0f}% of the CPU beside it (an upper bound)")
    native = RESULTS / "demo_bf16.json"  # the same demo where the CPU computes bf16 natively
    bf16 = json.loads(native.read_text()) if native.is_file() else None

    def peak(r: Result) -> str:  # records since each stage's peak memory was kept
        return "" if not r.get("peak_rss_mb") else f", peaking at {r['peak_rss_mb'] / 1024:.1f} GiB resident"

    also = "" if bf16 is None else f", and {minutes(bf16['wall_seconds'])} on {machine(bf16)}{peak(bf16)}"
    return (f"Measured: `make demo` ran {minutes(result['wall_seconds'])} to its summary{beside} on "
            f"{machine(result)}{peak(result)}{also} ([every stage](docs/experiments/demo-timings.md)); the demo corpus is "
            f"{c['documents']:,} documents in {c['blocks']:,} blocks, and its artifact store "
            f"{result['store_bytes'] / 2**30:.1f} GiB.")


def quantization_table(result: Result) -> str:
    """int8 dynamic quantization against fp32 on the demo system (bench/quantize.py): the speed of
    each inference-only pass and what it answers, paired over questions."""
    e, r = result["embedding"], result["reading"]

    def diff(p: Result) -> str:
        lo, hi = p["ci95"]
        noise = "within noise" if p["within_noise"] else "**outside noise**"
        return f"{100 * p['delta']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}], {noise}"

    ef, ei, rf, ri = e["precisions"]["fp32"], e["precisions"]["int8"], r["precisions"]["fp32"], r["precisions"]["int8"]
    lines = ["| demo system | fp32 (peer) | int8 | int8 / fp32 | int8 - fp32 (points, paired 95%) |",
             "|---|---:|---:|---:|---|",
             f"| block embedding, {e['blocks']:,} blocks of {e['block_length']} wordpieces (blocks/s) | "
             f"{ef['blocks_per_s']:.1f} | {ei['blocks_per_s']:.1f} | **{e['speedup']:.2f}x** | |"]
    for k in ("R@5", "R@20"):
        lines.append(f"| SQuAD-open, {e['questions']:,} questions, {k} over those vectors (%) | {100 * ef[k]:.1f} | "
                     f"{100 * ei[k]:.1f} | | {diff(e['paired'][k])} |")
    lines += [f"| {r['system']} + reader, {r['questions']:,} SQuAD-open test questions, top {r['top_k']} "
              f"(questions/s) | {rf['questions_per_s']:.2f} | {ri['questions_per_s']:.2f} | **{r['speedup']:.2f}x** | |",
              f"| the same questions, EM (%) | {100 * rf['EM']:.1f} | {100 * ri['EM']:.1f} | | "
              f"{diff(r['paired']['EM'])}; {r['paired']['EM']['changed']} answers differ |"]
    cpu = result["cpu"]
    isa = ("every library held to AVX2 (" + ", ".join(f"{k}={v}" for k, v in result["isa_environment"].items()) + ")"
           if result["isa"] == "avx2" else "its own instructions (" + (", ".join(cpu["flags"]) or "none named") + ")")
    lines += ["", f"{cpu['model']}, {result['threads']} threads, {isa}; quantized engine "
              f"{result['quantized_engine']}; 95% bootstrap intervals over questions; the whole benchmark "
              f"{minutes(result['wall_seconds'])}."]
    return "\n".join(lines)


def _record_machine(result: Result) -> str:
    cpu = result["cpu"]
    return f"{cpu['model']} ({cpu['cores']} cores; {', '.join(cpu['flags']) or 'no avx2/avx512_bf16/amx'}), {result['precision']}"


def laptop_table(result: Result) -> str:
    """Table 1 of a pipeline run's record (`realm record`): each system's EM / F1 / R@5 on each
    dataset after its open-domain phase, then every paired EM difference on the same questions."""
    openqa = result["openqa"]
    datasets = list(openqa)
    systems = list(dict.fromkeys(name for d in datasets for name in openqa[d]["systems"]))

    def cell(m: Result | None) -> str:
        if m is None:
            return "-"
        r5 = "-" if m.get("R@5") is None else f"{100 * m['R@5']:.1f}"
        return f"{100 * m['EM']:.1f} / {100 * m['F1']:.1f} / {r5}"

    lines = ["| system | " + " | ".join(f"{d} EM / F1 / R@5" for d in datasets) + " |",
             "|---|" + "---:|" * len(datasets)]
    lines += [f"| {name} | " + " | ".join(cell(openqa[d]["systems"].get(name)) for d in datasets) + " |"
              for name in systems]
    lines += ["", "| paired on the same test questions | " + " | ".join(f"{d} EM difference (points)" for d in datasets)
              + " |", "|---|" + "---|" * len(datasets)]
    pairs = list(dict.fromkeys(pair for d in datasets for pair in openqa[d]["paired"]))
    for pair in pairs:
        cells = []
        for d in datasets:
            q = openqa[d]["paired"].get(pair)
            cells.append("-" if q is None else f"{interval(q['delta'], q['ci95'])}, McNemar p {q['mcnemar_p']:.2g}")
        lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    counts = ", ".join(f"{d} {openqa[d]['questions']:,}" for d in datasets)
    lines += ["", f"Test questions: {counts}; each system's reader (and query encoder where trained) fine-tuned on "
              f"its own top-5 blocks with the retrieval score in one softmax, the document encoder and index "
              f"frozen; 95% intervals by bootstrap over questions. The `{result['preset']}` preset's own run on "
              f"{_record_machine(result)}: {result['wall_seconds'] / 3600:.1f} h from an empty store."]
    return "\n".join(lines)


def laptop_gain(result: Result) -> str:
    """The sentence that states a run's measured gain: REALM minus null-only on held-out masked
    spans, all and recoverable, and zero-shot retrieval before and after pretraining."""
    h = result["heldout"]
    g = h["gain"]
    text = (f"In the `{result['preset']}` preset's own run ({_record_machine(result)}, "
            f"{result['wall_seconds'] / 3600:.1f} h), REALM minus null-only on {h['examples']:,} held-out masked "
            f"spans: **{interval(g['accuracy_delta'], g['accuracy_ci95'])}** points; on the {h['recoverable']:,} "
            f"recoverable ones {interval(g['recoverable_delta'], g['recoverable_ci95'])} (95% intervals over "
            f"articles)")
    zero = result.get("zero_shot", {}).get("R@5 after - before")
    if zero:
        text += f"; zero-shot SQuAD-open dev R@5 moved {interval(zero['delta'], zero['ci95'])} (paired)"
    return text + "."


TABLES: dict[str, Callable[[Result], str]] = {
    "ingest": ingest_table,
    "spans": spans_table,
    "mips": mips_table,
    "embed": embed_table,
    "retrieval": retrieval_table,
    "pretrain_step": pretrain_step_table,
    "scaling": scaling_table,
    "projection": projection_table,
    "serve": serve_table,
    "add_memory": add_memory_table,
    "ask": ask_table,
    "gpu": gpu_table,
    "gpu_ict_run": gpu_ict_table,
    "ict_tokenise": ict_tokenise_table,
    "cpu_precision": cpu_precision_table,
    "cpu_precision_avx2": cpu_precision_table,
    "startup": startup_table,
    "knowledge": knowledge_table,
    "knowledge_bf16": knowledge_table,
    "demo": demo_table,
    "demo_bf16": demo_table,
    "demo_summary": demo_summary,
    "quantization": quantization_table,
    "quantization_avx2": quantization_table,
    "laptop": laptop_table,
    "laptop_gain": laptop_gain,
}
# a block rendered from another block's result file: {block name: result file name}
SOURCES = {"demo_summary": "demo", "laptop_gain": "laptop"}
COLLECTIONS: dict[str, Callable[[], str]] = {}
