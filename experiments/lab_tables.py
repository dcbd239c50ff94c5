"""The experiments' tables (experiments/*.py), each rendered from experiments/results/ by
bench/readme_tables.py into the experiment's page under docs/experiments/."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from peers import logged
from render import ROOT, Result, interval, minutes, resumed

RESULTS = ROOT / "experiments" / "results"


def _load(name: str) -> Result | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def warm_start_table(result: Result) -> str:
    res = result["results"]
    datasets = sorted(res, key=lambda d: d != "squad-open")
    metrics = [m for m in res[datasets[0]]["metrics"] if m in ("R@5", "R@20")]
    head = " | ".join(f"{d} {m}" for d in datasets for m in metrics)
    lines = [f"| retriever | budget (steps x batch x tokens) | train (s) | {head} |",
             "|---|---|---:|" + "---:|" * (len(datasets) * len(metrics))]
    for s in result["systems"]:
        b = result["budgets"].get(s["name"])
        budget = f"{b['steps']} x {b['batch_size']} x {b['tokens_per_example']}" if b else "-"
        secs = result["train_seconds"].get(s["name"])
        cells = " | ".join(f"{res[d]['systems'][s['name']][m]:.3f}" for d in datasets for m in metrics)
        lines.append(f"| {s['name']} | {budget} | {secs if secs is not None else '-'} | {cells} |")
    sizes = "; ".join(f"{d}: {res[d]['questions']:,} questions over {res[d]['blocks']:,} blocks" for d in datasets)
    text = "\n".join(lines) + f"\n\n{sizes}."
    if "openqa" in result:  # REALM pretraining from each warm start, then SQuAD-open fine-tuning
        qa = result["openqa"]
        rows = ["| REALM pretrained from | SQuAD-open EM | EM, answerable subset | R@5 |", "|---|---:|---:|---:|"]
        rows += [f"| {name} | {r['EM']:.3f} | {r['EM answerable']:.3f} | {r['R@5']:.3f} |" for name, r in qa.items()]
        text += "\n\n" + "\n".join(rows) + f"\n\n{next(iter(qa.values()))['questions']:,} SQuAD-open test questions."
    return text


def pretrain_table(result: Result) -> str:
    b = result["budget"]
    lines = [f"| run ({b['steps']} steps x {b['batch_size']} examples, lr {b['learning_rate']}, "
             f"k={b['top_k']} with the null block) | held-out span accuracy | held-out log p(y given x) | "
             "held-out retrieval utility | held-out p(null) | final train loss | blocked on index | wall (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, run in result["runs"].items():
        s = run["stats"]
        right = round(s['heldout_span_accuracy'] * run['eval'][-1]['examples'])
        lines.append(f"| {name} | {s['heldout_span_accuracy']:.3f} ({right}/{int(run['eval'][-1]['examples'])}) | "
                     f"{run['eval'][-1]['log_likelihood']:.2f} | "
                     f"{s['heldout_retrieval_utility']:.3f} | "
                     f"{s['heldout_p_null']:.3f} | {s['final_loss']:.2f} | "
                     f"{100 * s['blocked_on_index_fraction']:.1f}% | {s['wall_seconds']:.0f} |")
    realm = result["runs"]["REALM"]["stats"]
    evaluated = int(result["runs"]["REALM"]["eval"][-1]["examples"])
    lines += ["", f"Held-out: {evaluated} of the {realm['heldout_examples']:,} masked salient spans from "
              "articles never trained on; "
              f"{realm['train_examples']:,} training examples; refresh every {b['refresh_every']} steps, "
              f"{'synchronous' if b['sync_refresh'] else 'asynchronous'}; relevance `{b['relevance']}`; "
              f"masking `{b['masking']}`; encoders at {b.get('retriever_lr_scale', 1.0)}x the reader's "
              "learning rate."]
    if (warm := realm.get("reader_mlm")) is not None:
        lines[-1] += (f" Both start from one reader warmed up by {warm['steps']} steps of masked LM "
                      f"({b['reader_mlm_batch_size']} blocks a step, "
                      f"{warm['blocks']:,} blocks, held-out articles' {warm['heldout_blocks']} left out; "
                      f"{100 * warm['final_wordpiece_accuracy']:.0f}% of masked wordpieces right at the end; "
                      f"{warm['wall_seconds']:.0f} s, in neither wall column).")
    lines += _heldout_lines(result)
    return "\n".join(lines)


def _retriever_schedule(cfg: dict[str, Any], budget: dict[str, Any]) -> str:
    """The encoders' schedule as the run had it: frozen for a first phase, then trained at a
    multiple of the reader's rate."""
    return (f"the encoders frozen for the first {cfg['retriever_frozen_steps']} steps, "
            f"then at {budget['retriever_lr_scale']:g}x the reader's rate")


def _window_mean(steps: list[dict[str, float]], key: str, lo: int, hi: int) -> float:
    """The mean of `key` over the logged steps lo..hi (inclusive)."""
    vals = [r[key] for r in steps if lo <= r["step"] <= hi]
    return float(sum(vals) / len(vals))


def realm_gain_table(result: Result) -> str:
    """REALM against null-only at the gain budget (experiments/pretrain.py, experiments/results/pretrain.json):
    held-out accuracy on all and on the recoverable spans, the share whose span a retrieved block
    held, the paired gain split by it, the held-out curve at each evaluation, zero-shot recall."""
    cfg, runs, h = result["config"], result["runs"], result["heldout"]
    b = result["budget"]
    lines = ["| system | held-out span accuracy (%) | recoverable (%) | span in a retrieved block (%) | "
             "p(null) | retrieval utility | wall |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name in ("REALM", "null only"):
        st, sy = runs[name]["stats"], h["systems"][name]
        found = st.get("heldout_answer_retrieved")
        shown = "-" if found is None or name != "REALM" else f"{100 * found:.1f}"
        lines.append(f"| {name} | {100 * sy['accuracy']:.1f} | {100 * (sy['recoverable_accuracy'] or 0):.1f} | "
                     f"{shown} | "
                     f"{st['heldout_p_null']:.3f} | {st['heldout_retrieval_utility']:+.3f} | "
                     f"{minutes(st['wall_seconds'])}{resumed(st)} |")
    g = h["gain"]
    lines += ["", f"{h['examples']:,} held-out masked spans drawn at random from {h['articles']} articles never "
              f"trained on, {h['recoverable_examples']:,} of them recoverable. {b['steps']:,} steps of "
              f"{b['batch_size']} ({b['steps'] * b['batch_size'] / runs['REALM']['stats']['train_examples']:.2f} "
              f"passes over {runs['REALM']['stats']['train_examples']:,} training spans), lr {b['learning_rate']:g}, "
              f"top-{b['top_k']} with the null block, reader {cfg['reader_length']} wordpieces (query "
              f"{cfg['query_length']}, the whole block), {_retriever_schedule(cfg, b)}, "
              f"index refreshed every {b['refresh_every']} steps; {_starting_reader(b)}."
              + _utility_watch(runs["REALM"]["stats"], cfg), "",
              "| REALM minus null-only (points, 95% interval over articles) | examples | REALM (%) | null only (%) | "
              "difference |", "|---|---:|---:|---:|---|",
              f"| all held-out spans | {h['examples']:,} | {100 * h['systems']['REALM']['accuracy']:.1f} | "
              f"{100 * h['systems']['null only']['accuracy']:.1f} | "
              f"**{interval(g['accuracy_delta'], g['accuracy_ci95'])}** |",
              f"| recoverable spans | {h['recoverable_examples']:,} | "
              f"{100 * (h['systems']['REALM']['recoverable_accuracy'] or 0):.1f} | "
              f"{100 * (h['systems']['null only']['recoverable_accuracy'] or 0):.1f} | "
              f"**{interval(g['recoverable_delta'], g['recoverable_ci95'])}** |"]
    for key, label in (("answer_retrieved", "REALM's retrieved blocks held the span"),
                       ("answer_not_retrieved", "they did not")):
        part = (h.get("by_retrieval") or {}).get(key)
        if part and part["examples"]:
            lines.append(f"| {label} | {part['examples']:,} | {100 * part['REALM']:.1f} | "
                         f"{100 * part['null only']:.1f} | {interval(part['delta'], part['ci95'])} |")
    curves = result.get("curves", {})
    lines += _training_windows(curves)
    realm_evals = {int(e["step"]): e for e in curves.get("REALM", {}).get("evals", [])}
    null_evals = {int(e["step"]): e for e in curves.get("null only", {}).get("evals", [])}
    if realm_evals:
        lines += ["", "| step | REALM held-out accuracy (%) | null only (%) | span in a retrieved block (%) | "
                  "p(null) | retrieval utility |", "|---:|---:|---:|---:|---:|---:|"]
        for step, e in sorted(realm_evals.items()):
            null = null_evals.get(step)
            found = e.get("answer_retrieved")
            null_acc = "-" if null is None else f"{100 * null['heldout_accuracy']:.1f}"
            found_at = "-" if found is None else f"{100 * found:.1f}"
            lines.append(f"| {step:,} | {100 * e['heldout_accuracy']:.1f} | {null_acc} | {found_at} | {e['p_null']:.3f} | "
                         f"{e['retrieval_utility']:+.3f} |")
    if (z := result.get("zero_shot")) is not None:
        lines += ["", f"Zero-shot retrieval, SQuAD-open dev ({z['questions']} questions): R@5 "
                  f"{100 * z['before']['R@5']:.1f} before REALM pretraining, {100 * z['after']['R@5']:.1f} after "
                  f"(paired: {interval(z['R@5 after - before']['delta'], z['R@5 after - before']['ci95'])}); "
                  f"R@20 {100 * z['before']['R@20']:.1f} -> {100 * z['after']['R@20']:.1f} "
                  f"({interval(z['R@20 after - before']['delta'], z['R@20 after - before']['ci95'])})."]
    return "\n".join(lines)


def _starting_reader(budget: dict[str, Any]) -> str:
    """Where both runs' reader came from: the preset's masked-LM warm-up, or a reader given by
    `pretrain.reader_encoder` (with the warm-up off), which the page that runs it names."""
    if budget["reader_mlm_steps"]:
        return f"both from one reader warmed up by {budget['reader_mlm_steps']:,} steps of masked LM"
    return "both from the one reader `pretrain.reader_encoder` names, with no masked-LM warm-up of their own"


def _utility_watch(stats: dict[str, Any], cfg: dict[str, Any]) -> str:
    """The run's collapse watch: the longest stretch of trained steps over which the mean retrieval
    utility of every `utility_window` steps stayed below 0, or that none did."""
    stretch = stats.get("utility_below_zero_steps")
    if stats.get("retriever_trained_from_step") is None:
        return ""
    if stretch is None:
        return (f" With the encoders training, no {cfg['utility_window']}-step mean of REALM's retrieval "
                "utility fell below 0.")
    return (f" With the encoders training, REALM's retrieval utility averaged over {cfg['utility_window']} steps "
            f"was below 0 for steps {stretch[0]:,}-{stretch[1]:,} at the longest.")


HOLDER_WEIGHT = "retrieval weight on its holders (%)"


HOLDER_WEIGHT_NOTE = ("Retrieval weight on its holders: where a retrieved block holds the span, the share of "
                      "p(z|x) (the null block among the z) on such blocks; a retriever that learns from "
                      "REALM's gradient raises it.")


def _holder_weight(p_holder: float, found: float) -> str:
    """A table cell: the mean p(z|x) on span-holding blocks over the share of examples with one
    retrieved (`p_holder` is 0 where none is), in percent; "-" where none was."""
    return f"{100 * p_holder / found:.1f}" if found else "-"


def _training_windows(curves: dict[str, Any], windows: int = 10) -> list[str]:
    """Both runs' training curves in `windows` equal stretches of steps: span accuracy on the
    training batches, and for REALM retrieval utility and the share of examples whose span a
    retrieved block held."""
    realm, null = (curves.get(n, {}).get("steps", []) for n in ("REALM", "null only"))
    if not realm or not null:
        return []
    last = int(max(r["step"] for r in realm))
    size = max(1, last // windows)
    copying = "copy_accuracy" in realm[0]
    weighing = logged(realm, "p_holder")
    lines = ["", f"Training curves, {size}-step means over the training batches:", "",
             "| steps | REALM span accuracy (%) | null only (%) | REALM retrieval utility | "
             "span in a retrieved block (%) |" + (f" {HOLDER_WEIGHT} |" if weighing else "")
             + (" REALM's reader on z* alone (%) |" if copying else ""),
             "|---|---:|---:|---:|---:|" + ("---:|" if weighing else "") + ("---:|" if copying else "")]
    for lo in range(1, last + 1, size):
        hi = min(lo + size - 1, last)
        found = _window_mean(realm, 'answer_retrieved', lo, hi)
        lines.append(f"| {lo}-{hi} | {100 * _window_mean(realm, 'span_accuracy', lo, hi):.1f} | "
                     f"{100 * _window_mean(null, 'span_accuracy', lo, hi):.1f} | "
                     f"{_window_mean(realm, 'retrieval_utility', lo, hi):+.3f} | "
                     f"{100 * found:.1f} |"
                     + (f" {_holder_weight(_window_mean(realm, 'p_holder', lo, hi), found)} |" if weighing else "")
                     + (f" {100 * _window_mean(realm, 'copy_accuracy', lo, hi):.1f} |" if copying else ""))
    if weighing:
        lines += ["", HOLDER_WEIGHT_NOTE]
    if copying:
        lines += ["", "z*: for each training example whose span an allowed block holds (about "
                  f"{100 * _window_mean(realm, 'copy_coverage', 1, last):.0f}% of them), the holder the "
                  "current retriever scores highest, read alone by the reader for the copy objective."]
    return lines


def _heldout_lines(result: Result) -> list[str]:
    """The held-out test drawn over articles, Table 2's rows and zero-shot recall, where the
    results file has them (runs of experiments/pretrain.py since the held-out test was redrawn)."""
    lines: list[str] = []
    if (h := result.get("heldout")) is not None:
        g = h["gain"]
        lines += ["", f"Held-out test: {h['examples']:,} masked spans drawn at random from {h['articles']} held-out "
                  f"articles, {h['recoverable_examples']:,} of them recoverable (the span occurs in a block that is "
                  f"not a trivial retrieval). REALM minus null-only, points with a 95% interval from resampling "
                  f"articles: all {interval(g['accuracy_delta'], g['accuracy_ci95'])}, recoverable "
                  f"{interval(g['recoverable_delta'], g['recoverable_ci95'])}."]
    if len(rows := result.get("ablations", [])) > 2:
        lines += ["", "| REALM Table 2 row | masking | held-out accuracy | recoverable accuracy | row minus REALM "
                  "(points, 95% interval over articles) | log p(y given x) | retrieval utility | wall (s) |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            rec = "-" if r["recoverable_accuracy"] is None else f"{r['recoverable_accuracy']:.3f}"
            lines.append(f"| {r['name']} | {r['masking']} | {r['accuracy']:.3f} | {rec} | "
                         f"{interval(r['minus_realm'], r['minus_realm_ci95'])} | {r['log_p']:.2f} | "
                         f"{r['retrieval_utility']:.3f} | {r['wall_seconds']:.0f} |")
    if (z := result.get("zero_shot")) is not None:
        lines += ["", f"Zero-shot retrieval, SQuAD-open dev ({z['questions']} questions of articles "
                  f"{z['articles'][0]}-{z['articles'][1]}): R@5 {100 * z['before']['R@5']:.1f} before REALM "
                  f"pretraining ({z['warm_start']} encoders), {100 * z['after']['R@5']:.1f} after "
                  f"(paired: {interval(z['R@5 after - before']['delta'], z['R@5 after - before']['ci95'])}); "
                  f"R@20 {100 * z['before']['R@20']:.1f} -> {100 * z['after']['R@20']:.1f} "
                  f"({interval(z['R@20 after - before']['delta'], z['R@20 after - before']['ci95'])})."]
    return lines


def openqa_summary_table(result: Result) -> str:
    """REALM Table 1's system rows alone (README's one results table): EM / F1 / R@k per dataset."""
    table = openqa_table(result).split("\n\n", 1)[0]
    names = {"nq": "NQ-open", "wq": "WebQuestions", "ct": "CuratedTREC", "squad-open": "SQuAD-open"}
    counts = [f"{names.get(d, d)} {result['results'][d]['questions']:,}"
              for d in sorted(result["results"], key=lambda d: list(names).index(d) if d in names else 9)]
    return table + "\n\nTest questions: " + ", ".join(counts) + "; EM, F1 and recall in %."


def openqa_table(result: Result) -> str:
    """REALM Table 1 from `realm evaluate --json`: EM / F1 / R@k / R@k of the text read per
    dataset, then the paired EM differences on SQuAD-open, the budgets and the dev-fit settings."""
    res, ft = result["results"], result["finetune"]
    order = [d for d in ("nq", "wq", "ct", "squad-open") if d in res] + [d for d in res if d not in
                                                                         ("nq", "wq", "ct", "squad-open")]
    k = ft["top_k"]
    names = {"nq": "NQ", "wq": "WQ", "ct": "CT", "squad-open": "SQuAD-open"}
    lines = ["| system | " + " | ".join(f"{names.get(d, d)} EM / F1 / R@{k} / R@{k} read" for d in order) + " |",
             "|---|" + "---:|" * len(order)]
    for s in result["systems"]:
        cells = []
        for d in order:
            m = res[d]["systems"].get(s["name"])
            cells.append("-" if m is None else f"{100 * m['EM']:.1f} / {100 * m['F1']:.1f} / "
                         f"{100 * m[f'R@{k}']:.1f} / {100 * m[f'R@{k} read']:.1f}")
        bold = "**" if s["name"] == "REALM" else ""
        lines.append(f"| {bold}{s['name']}{bold}{' (' + s['note'] + ')' if s['note'] else ''} | "
                     + " | ".join(cells) + " |")
    sizes = "; ".join(f"{names.get(d, d)} {res[d]['questions']:,} ({res[d]['answerable']:,} answerable)"
                      for d in order)
    gold = ft["gold_passage"]
    lines += ["", f"Test questions (answerable: a gold answer occurs in some demo block): {sizes}. "
              f"Readers trained on {ft['dataset']}/{ft['split']}: gold passages {gold['steps']} steps x "
              f"{gold['batch_size']} (lr {gold['learning_rate']}, best of every {gold['eval_every']} steps by "
              f"dev EM), then {ft['steps']} steps x {ft['batch_size']} on each system's top-{k} blocks; "
              f"reader rows of {ft['reader_length']} wordpieces."]
    budget = result.get("budget", {})
    for name, stats in budget.items():
        g = stats.get("gold_passage") or {}
        o = stats.get("open") or {}
        lines[-1] += (f" {name}: gold-passage phase {g.get('examples_seen', 0):,} examples "
                      f"({g.get('epochs', 0)} epochs, {g.get('wall_seconds', 0):,.0f} s, best dev EM "
                      f"{100 * (g.get('best_dev_em') or 0):.1f}), open phase {o.get('examples_seen', 0):,} examples.")
    for name, t in result.get("temperatures", {}).items():
        temperature = "uniform" if t["temperature"] is None else t["temperature"]
        lines[-1] += (f" {name} answers in the {t['form']} form at retrieval temperature {temperature} "
                      f"(best of {len(t['dev_em'])} settings on dev: {100 * max(t['dev_em'].values()):.1f} EM).")
    starts: dict[str, list[str]] = {}
    for s in result["systems"]:
        if s.get("fine_tuned") and s.get("reader_start"):
            starts.setdefault(_reader_start(s["reader_start"]), []).append(s["name"])
    if starts:
        lines[-1] += " Span readers start from " + "; ".join(
            f"{where} ({', '.join(names)})" for where, names in starts.items()) + "."
    paired = [d for d in order if res[d].get("paired")]
    pairs = list(dict.fromkeys(pair for d in paired for pair in res[d]["paired"]))
    if pairs:  # one row per pair of systems, one column per dataset: the same questions, paired
        lines += ["", "| paired EM difference (points), 95% bootstrap interval, McNemar p | "
                  + " | ".join(names.get(d, d) for d in paired) + " |",
                  "|---|" + "---:|" * len(paired)]
        for pair in pairs:
            cells = []
            for d in paired:
                p = res[d]["paired"].get(pair)
                cells.append("" if p is None else f"{100 * p['delta']:+.1f} [{100 * p['ci95'][0]:+.1f}, "
                             f"{100 * p['ci95'][1]:+.1f}], p {p['mcnemar_p']:.2g}")
            lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _open_phase_row(run: Result, system: str, paired: Result | None) -> str:
    """One run of `make openqa-open-phase`, its settings read from the run itself (the ICT warm
    start's stats and config and the fine-tune config that experiments/paired_runs.py keeps)."""
    ws = (run.get("warm_starts") or {}).get("ict") or {}
    length = ((run.get("warm_start_configs") or {}).get("ict") or {}).get("block_length")
    ft = run.get("finetune") or {}
    o = (run.get("budget") or {}).get(system, {}).get("open") or {}
    m = run["systems"][system]
    ict = "-" if not ws else (f"{ws['steps']} x {ws['batch_size']:,}"
                              + (f" of {length} wordpieces" if length else "") + f", {ws['train_seconds']:,.0f} s")
    if not ft.get("steps"):
        phase = "none"
    else:
        query = "trained" if ft["train_query_encoder"] else "frozen"
        rate = f" at lr {_lr(ft['learning_rate'])}" if ft.get("learning_rate") else ""  # older runs: unknown
        phase = (f"{ft['steps']:,} steps x {ft['batch_size']}{rate}, query encoder {query}: {o['examples_seen']:,} "
                 f"examples, {o['epochs']} epochs, {o['wall_seconds']:,.0f} s")
    curve = ", ".join(f"{step:,.0f}: {100 * em:.1f}" for step, em in o.get("dev_curve", [])) or "-"
    gain = "-" if paired is None else f"**{interval(paired['delta'], paired['ci95'])}**, p {paired['mcnemar_p']:.2g}"
    return (f"| {ict} | {phase} | {curve} | {100 * m['R@5']:.1f} | {100 * m['EM']:.1f} / {100 * m['F1']:.1f} | "
            f"{gain} |")


OPEN_PHASE_VARIANTS = (("openqa_ictb1024_open_test", "openqa_ictb1024_vs_ict_open_test", "ICT's 4x contexts",
                        "the demo's ICT"),
                       ("openqa_ict288_open_test", "openqa_ict288_vs_ict_open_test",
                        "ICT on 288-wordpiece blocks", "the demo's ICT"),
                       ("openqa_ict288_600_open_test", "openqa_ict288_600_vs_ict_open_test",
                        "ICT on 288-wordpiece blocks with a 600-step phase", "the demo's ICT"),
                       ("openqa_ict288_600_lr1e-4_open_test", "openqa_ict288_600_lr1e-4_vs_5e-5_open_test",
                        "ICT on 288-wordpiece blocks with a 600-step phase", "the same ICT"),
                       ("openqa_ict288_1200_open_test", "openqa_ict288_1200_vs_600_open_test",
                        "ICT on 288-wordpiece blocks with a 1,200-step phase", "the same ICT"),
                       ("openqa_ict288b1024_600_open_test", "openqa_ict288b1024_600_vs_ict288_1200_open_test",
                        "ICT's 4x contexts on 288-wordpiece blocks with a 600-step phase",
                        "ICT on 288-wordpiece blocks (256 contexts) with the 1,200-step phase"))
"""(result, pairing, label, what the pairing's second side is): the rows below the first two."""


# more pairings of two rows, each a note under the table: (pairing, label, what its second side is)
OPEN_PHASE_PAIRS = (("openqa_ict288_600_vs_300_open_test", "ICT on 288-wordpiece blocks with a 600-step phase",
                     "the same ICT"),
                    ("openqa_ictb1024_vs_ict288_open_test", "ICT's 4x contexts",
                     "ICT on 288-wordpiece blocks"))


def _lr(value: float) -> str:
    return f"{value:.0e}".replace("e-0", "e-")


def _phases(pair: Result) -> str:
    """How the two sides' open-domain phases differ: length, rate, or neither."""
    a, b = ((pair["runs"][side].get("finetune") or {}) for side in ("a", "b"))
    if a.get("steps") != b.get("steps"):
        return f"with open-domain phases of {a['steps']:,} and {b['steps']:,} steps"
    if a.get("learning_rate") != b.get("learning_rate"):
        return f"with open-domain phases at lr {_lr(a['learning_rate'])} and {_lr(b['learning_rate'])}"
    return "both with the open-domain phase"


def open_phase_table(result: Result) -> str:
    """`make openqa-open-phase`: the ICT row of the open-QA table without and with the
    open-domain phase, then each ICT variant with the phase (4x in-batch negatives, whole
    288-wordpiece blocks, those with a phase twice as long, that phase at twice the rate, a phase
    four times as long, 4x the contexts on those blocks), each paired with the first row on the
    same test questions, and below the table with the run it varies, naming how the two sides'
    phases differ
    (experiments/results/openqa_ict_open_test.json and its siblings, where present)."""
    system = "ICT (ORQA-like)"
    rows = [(result["runs"]["b"], None), (result["runs"]["a"], result["paired"][system])]
    notes = []
    pairs = [(against, label, other) for _, against, label, other in OPEN_PHASE_VARIANTS] + list(OPEN_PHASE_PAIRS)
    for name, *_ in OPEN_PHASE_VARIANTS:
        if (RESULTS / f"{name}.json").is_file():
            w = json.loads((RESULTS / f"{name}.json").read_text())
            rows.append((w["runs"]["a"], w["paired"][system]))
    for against, label, other in pairs:
        if (RESULTS / f"{against}.json").is_file():
            pair = json.loads((RESULTS / f"{against}.json").read_text())
            p = pair["paired"][system]
            notes.append(f"{label} against {other}, {_phases(pair)}: "
                         f"{interval(p['delta'], p['ci95'])}, McNemar p {p['mcnemar_p']:.2g}, on "
                         f"{p['questions']:,} test questions.")
    dev = (result["runs"]["a"].get("finetune") or {}).get("dev_questions")
    lines = [f"| ICT: steps x contexts, training | open-domain phase | dev EM by step ({dev} dev questions) | "
             "test R@5 | test EM / F1 | paired EM gain over the first row, 95% interval, McNemar p |",
             "|---|---|---|---:|---:|---|"]
    lines += [_open_phase_row(run, system, paired) for run, paired in rows]
    return "\n\n".join(["\n".join(lines), *notes])


def _reader_start(path: str) -> str:
    parts = Path(path).parts
    if "reader_mlm" in parts:
        return "the reader masked-LM warm-up that REALM pretraining starts from"
    if "realm_model" in parts:  # REALM's run or the null-only one: both are realm_model artifacts
        return f"the reader of pretraining run `realm_model/{parts[parts.index('realm_model') + 1][:8]}`"
    if path.startswith("bundled:"):
        return f"`{path.split(':', 1)[1]}` as shipped"
    # a directory outside the store: the reader `pretrain.reader_encoder` names, REALM's start too
    return "the reader `pretrain.reader_encoder` names, the one REALM pretraining starts from"


def realm_mechanism_table(result: Result) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}"

    lines = ["| system | held-out accuracy (%) | gold block recall@1 (%), start -> end | p(null) at the end | "
             "retrieval utility at the end |", "|---|---|---|---|---|"]
    for name, s in result["systems"].items():
        recall = "given" if name == "oracle block" else (
            "-" if s["recall_at_1_start"] is None else f"{pct(s['recall_at_1_start'])} -> {pct(s['recall_at_1_end'])}")
        extra = ("-", "-") if "final_p_null" not in s else (f"{s['final_p_null']:.3f}", f"{s['final_retrieval_utility']:+.3f}")
        lines.append(f"| {name} | **{pct(s['heldout_accuracy'])}** | {recall} | {extra[0]} | {extra[1]} |")
    lines.append(f"| prior (the most frequent training answer of the span's length) | {pct(result['prior_accuracy'])} "
                 "| - | - | - |")
    c, cfg = result["corpus"], result["config"]
    lines += ["", f"{result['heldout_examples']:,} held-out facts of {c['heldout_entities']} entities never trained on "
              f"({result['train_examples']:,} training examples; {c['blocks']:,} blocks: {c['entities']} entities "
              f"x 2 documents and {c['distractors']} distractors, {c['first_names']} first names, {c['surnames']} "
              f"surnames). {result['steps']:,} steps of {result['examples_per_step']}, top-{cfg['top_k']} with "
              f"the null block, reader {cfg['reader_length']} wordpieces, lr {cfg['learning_rate']:g} "
              f"(retriever x{cfg['retriever_lr_scale']:g}, frozen for the first "
              f"{cfg.get('retriever_frozen_steps', 0)} steps)"
              + (f", from the warm-up reader copy-trained {cfg['copy_steps']} steps on the gold blocks"
                 if cfg.get("copy_steps") else "")
              + f", {cfg['precision']}; " + _mechanism_timing(result)]
    return "\n".join(lines)


def _mechanism_timing(result: Result) -> str:
    """How long REALM's stage ran: a timing on an accelerator the run had to itself; on a CPU
    the wall time, whose conditions the page's reproduction log states."""
    seconds, device = result["systems"]["REALM"]["wall_seconds"], result.get("device", "cpu")
    if device == "cpu":
        return (f"REALM's stage ran {minutes(seconds)} on {result['machine']} (the reproduction log says whether "
                "other jobs ran beside it).")
    return (f"REALM's stage ran {seconds:.0f} s on one {device} (torch {result['torch']}), "
            f"{result['steps'] / seconds:.1f} steps/s with its index refreshes and evaluations.")


def realm_reading_table(result: Result) -> str:
    """Whether the pretraining reader copies (experiments/realm_reading.py): each reader's span
    accuracy on recoverable held-out examples reading the null block alone and the oracle block
    alone; for the starting reader also as pretraining scores it (the marginal over the frozen
    retriever's top-k and the null block against the null block alone)."""
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}"

    def diff(d: dict[str, Any]) -> str:
        return f"{100 * d['delta']:+.1f} [{100 * d['ci95'][0]:+.1f}, {100 * d['ci95'][1]:+.1f}]"

    lines = ["| reader | null block alone (%) | oracle block alone (%) | oracle - null, points [95% CI] |",
             "|---|---:|---:|---|"]
    for name, m in result["readers"].items():
        lines.append(f"| {name} | {pct(m['null_block_accuracy'])} | **{pct(m['oracle_block_accuracy'])}** | "
                     f"{diff(m['oracle_minus_null'])} |")
    rank, top = result["oracle_rank"], result["top_k"] - 1
    notes = [f"{result['recoverable']:,} of {result['heldout_examples']:,} held-out masked spans are recoverable "
             f"(the span in an allowed block; a median of {result['holders_median']:.0f} such blocks each); the "
             f"oracle block is the one the warm-started retriever scores highest, and it ranks within the "
             f"top {top} (what REALM reads) for {pct(rank[f'within_top_{top}'])}%, within the top 100 for "
             f"{pct(rank['within_top_100'])}% (median rank {rank['median']:.0f}); cut to the reader's "
             f"{result['reader_length']} wordpieces it still holds the span for "
             f"{pct(result['oracle_holds_span_as_read'])}%."]
    if "realm_minus_null_reader_on_oracle" in result:
        notes.append("REALM's reader minus the null-only reader, both reading the oracle block: "
                     f"{diff(result['realm_minus_null_reader_on_oracle'])} points.")
    marginal = result.get("marginal") or {}
    if marginal:
        lines += ["", notes.pop(0), "", "As pretraining scores them, on the first held-out examples (all, "
                  "recoverable or not), encoders frozen:", "",
                  f"| reader | top-{top} + null block (%) | null block alone (%) | retrieval - null, points "
                  "[95% CI] | span in a retrieved block (%) | of those: with retrieval / alone (%) |",
                  "|---|---:|---:|---|---:|---|"]
        for name, m in marginal.items():
            lines.append(f"| {name} ({m['examples']:,} examples) | **{pct(m['retrieval_accuracy'])}** | "
                         f"{pct(m['null_block_accuracy'])} | {diff(m['retrieval_minus_null'])} | "
                         f"{pct(m['answer_retrieved'])} | {pct(m['answer_retrieved_retrieval_accuracy'])} / "
                         f"{pct(m['answer_retrieved_null_accuracy'])} |")
    lines += ["", " ".join(notes)] if notes else []
    retrieval = result.get("retrieval") or {}
    if retrieval:
        lines += ["", "Retrieval by each pretraining run's own encoders against the warm-started retriever's, on "
                  "the same recoverable examples (the best span-holding allowed block's rank):", "",
                  f"| run | encoders trained from step | within top {top} (%): start -> end, points [95% CI] | "
                  "within top 100 (%): start -> end, points [95% CI] | median rank: start -> end | rank rose / fell "
                  "(% of examples) |", "|---|---:|---|---|---|---|"]
        for name, r in retrieval.items():
            k, h = r[f"within_top_{top}"], r["within_top_100"]
            lines.append(f"| {name} ({r['steps']:,} steps) | {r['trained_from_step']} | {pct(k['start'])} -> "
                         f"**{pct(k['end'])}**, {diff(k['end_minus_start'])} | {pct(h['start'])} -> "
                         f"**{pct(h['end'])}**, {diff(h['end_minus_start'])} | {r['median_rank']['start']:.1f} -> "
                         f"{r['median_rank']['end']:.1f} | {pct(r['rank_rose'])} / {pct(r['rank_fell'])} |")
    for name, r in retrieval.items():
        if "curve" in r:
            lines += ["", *_run_curve_table(name, r["curve"])]
    machine = f"{result['precision']} on {result['machine']}"
    if {"REALM reader", "null-only reader"} & set(result["readers"]):
        run = "encoders frozen" if result["freeze_retriever"] else "encoders trained"
        lines += ["", f"The pretraining runs read: {result['pretrain_steps']:,} steps of {result['batch_size']} "
                  f"({run}); {machine}."]
    else:
        lines += ["", f"No pretraining run's reader at this config was in the cache; {machine}."]
    return "\n".join(lines)


def _run_curve_table(name: str, curve: Result) -> list[str]:
    """A pretraining run's learning curve (experiments/realm_reading.py `run_curve`): its training
    steps averaged per window, then its held-out evaluations."""
    weighing = logged([*curve["training"], *curve["heldout"]], "p_holder")

    def row(what: str, encoders: str, r: Result) -> str:
        weight = f" {_holder_weight(r['p_holder'], r['answer_retrieved'])} |" if weighing else ""
        return (f"| {what} | {encoders} | {100 * r['span_accuracy']:.1f} | {r['retrieval_utility']:+.3f} | "
                f"{r['p_null']:.3f} | {100 * r['answer_retrieved']:.1f} |" + weight)

    def trained(share: float) -> str:
        return "frozen" if share == 0 else "trained" if share == 1 else f"trained {100 * share:.0f}% of steps"

    then = ", then its held-out evaluations" if curve["heldout"] else ""
    lines = [f"{name}'s curve: training steps averaged over {curve['window']}-step windows{then}:", "",
             "| steps | encoders | span accuracy (%) | retrieval utility | p(null) | span in a retrieved block (%) |"
             + (f" {HOLDER_WEIGHT} |" if weighing else ""),
             "|---|---|---:|---:|---:|---:|" + ("---:|" if weighing else "")]
    lines += [row(f"{w['first_step']}-{w['last_step']}, training", trained(w["retriever_trained"]), w)
              for w in curve["training"]]
    lines += [row(f"held out at step {e['step']} ({e['examples']:,} examples)", "", e) for e in curve["heldout"]]
    if weighing:
        lines += ["", HOLDER_WEIGHT_NOTE]
    return lines


# The reader studies (docs/experiments/reader.md): each a pair of `realm evaluate` runs on the same
# SQuAD-open questions, run a minus run b, written by experiments/paired_runs.py.
# (result file, split, what run a changed, what run b was)
READER_STUDIES: tuple[tuple[str, str, str, str], ...] = (
    ("openqa_reader_start", "test", "reader starts from MiniLM as shipped", "from the masked-LM warm-up"),
    ("openqa_gold_phase", "test", "gold phase of two epochs (span limit 10)", "300 steps"),
    ("openqa_gold_3ep", "test", "gold phase of three epochs", "two epochs"),
    ("openqa_gold_lr_dev", "dev", "gold phase lr 2e-4", "lr 1e-4"),
    ("openqa_gold_lr4e-4_dev", "dev", "gold phase lr 4e-4", "lr 1e-4"),
    ("openqa_gold_lr4e-4_vs_2e-4_dev", "dev", "gold phase lr 4e-4", "lr 2e-4"),
    ("openqa_gold_lr_test", "test", "gold phase lr 2e-4 (chosen on dev)", "lr 1e-4"),
    ("openqa_dropout_dev", "dev", "reader dropout 0.1", "dropout 0"),
    ("openqa_gold_negatives_dev", "dev", "one BM25 hard negative per gold paragraph (removed)", "gold paragraphs only"),
    ("openqa_gold_block_dev", "dev", "the corpus block as the gold positive (removed)", "SQuAD's paragraph"),
    ("openqa_ict_pooling_dev", "dev", "ICT with mean pooling (removed)", "ICT with [CLS] pooling"),
    ("openqa_ict_batch_dev", "dev", "ICT 30 steps of 1,024 contexts", "60 of 256"),
    ("openqa_ict_batch60_dev", "dev", "ICT 60 steps of 1,024 contexts", "60 of 256"),
    ("openqa_ict_batch60_test", "test", "ICT 60 steps of 1,024 contexts", "60 of 256"),
    ("openqa_ict_len288_dev", "dev", "ICT on whole 288-wordpiece blocks", "the 64-wordpiece view"),
    ("openqa_ict_len288_test", "test", "ICT on whole 288-wordpiece blocks", "the 64-wordpiece view"),
)


def _side_systems(pairing: Result, side: str) -> dict[str, Any] | None:
    """One side's per-system figures: kept in the pairing, or (pairings written before it kept
    them) in the side's own `realm evaluate --json` file when that is a committed result."""
    if "runs" in pairing:
        systems: dict[str, Any] = pairing["runs"][side]["systems"]
        return systems
    path = RESULTS / Path(pairing[side]).name  # where the committed results are now
    if Path(pairing[side]).parent.name == "results" and path.is_file():
        run: dict[str, Any] = json.loads(path.read_text())["results"][pairing["dataset"]]["systems"]
        return run
    return None


def reader_studies_table() -> str:
    """Every reader study of READER_STUDIES present in experiments/results: per system that reads, EM of
    both runs (where the file keeps them) and the paired difference with its interval."""
    lines = ["| run a | run b | split | system | EM a / b (%) | a - b (points), 95% interval, McNemar p | result |",
             "|---|---|---|---|---:|---|---|"]
    for name, split, a, b in READER_STUDIES:
        r = _load(name)
        if r is None:
            continue
        for system, p in r["paired"].items():
            if system == "no retrieval" or (p["delta"] == 0 and p["ci95"] == [0, 0]):
                continue  # answers nothing, or the study left the system as it was: the same outcomes
            em = "-"
            sides = [_side_systems(r, x) for x in "ab"]
            if all(side is not None and system in side for side in sides):
                em = " / ".join(f"{100 * side[system]['EM']:.1f}" for side in sides if side is not None)
            lines.append(f"| {a} | {b} | {split} ({p['questions']:,}) | {system} | {em} | "
                         f"{interval(p['delta'], p['ci95'])}, p {p['mcnemar_p']:.2g} | `{name}.json` |")
    return "\n".join(lines)


READER_ERRORS = (("reader_errors_dev_base", "gold phase at lr 1e-4 (the baseline of the dev studies)"),
                 ("reader_errors_dev_lr2e-4", "lr 2e-4"), ("reader_errors_dev_lr4e-4", "lr 4e-4"),
                 ("reader_errors_dev_drop01", "dropout 0.1"),
                 ("reader_errors_dev_neg1", "one BM25 hard negative per gold paragraph"),
                 ("reader_errors_dev_block", "the corpus block as the gold positive"))


def reader_errors_table() -> str:
    """Where BM25 + reader loses the questions the gold-paragraph reader answers, per dev study
    (experiments/reader_errors.py)."""
    lines = ["| gold-paragraph phase | questions lost | no answer in the top 5 | read from a block without "
             "the answer | right block, wrong span | result |", "|---|---:|---:|---:|---:|---|"]
    for name, label in READER_ERRORS:
        r = _load(name)
        if r is None:
            continue
        e = r["systems"]["BM25 + reader"]
        lines.append(f"| {label} | {e['lost']} | {e['no answer retrieved']} | "
                     f"{e['read from a block without the answer']} | "
                     f"{e['read from the block that holds the answer']} | `{name}.json` |")
    first = _load(READER_ERRORS[0][0])
    if first is not None:
        lines += ["", f"On the {first['questions']:,} SQuAD-open dev questions: of those the gold-paragraph reader "
                  "answers, BM25 + reader misses (lost) because no block of its top 5 holds an answer, because it "
                  "reads its answer from a block that holds none, or because it picks the wrong span of a block "
                  "that holds one."]
    return "\n".join(lines)


def query_phase_table() -> str:
    """ORQA's early update of the query encoder (removed), measured on dev: recall@5 at each
    evaluation (query_phase_dev_*.json)."""
    lines = ["| learning rate | steps x batch | epochs | dev recall@5 before | best dev recall@5 (step) | "
             "kept | result |", "|---|---:|---:|---:|---:|---|---|"]
    for name in ("query_phase_dev_lr1e-5", "query_phase_dev_lr1e-4"):
        r = _load(name)
        if r is None:
            continue
        q, ph = r["query_phase"], r["phase"]
        kept = "the starting weights" if ph["best_step"] == 0 else f"step {ph['best_step']}"
        lines.append(f"| {q['learning_rate']:g} | {ph['steps_run']} x {q['batch_size']} | {ph['epochs']} | "
                     f"{100 * ph['dev_recall_before']:.1f} | {100 * ph['best_dev_recall']:.1f} ({ph['best_step']}) | "
                     f"{kept} | `{name}.json` |")
    return "\n".join(lines)


def answer_lengths_table(result: Result) -> str:
    """How many SQuAD-open questions have no answer within the span limits (experiments/answer_lengths.py)."""
    lines = ["| split | questions | no answer within 10 wordpieces | within 20 |", "|---|---:|---:|---:|"]
    for split in ("train", "dev", "test"):
        s = result["splits"][split]
        lines.append(f"| {split} | {s['questions']:,} | {s['over_10']} ({100 * s['over_10'] / s['questions']:.1f}%) | "
                     f"{s['over_20']} ({100 * s['over_20'] / s['questions']:.1f}%) |")
    e = result.get("eval")
    if e:
        got = ", ".join(f"{n} {c}" for n, c in e["correct"].items() if n != "no retrieval")
        lines += ["", f"Of the {e['questions']} test questions with no answer within {e['limit']} wordpieces, "
                  f"the run `{e['file']}` (span limit 20) answered: {got}."]
    return "\n".join(lines)


def demo_cuts_table(result: Result) -> str:
    """What the demo's budgets cost against the research budgets it was cut from: the two runs'
    `realm evaluate --json` paired on SQuAD-open test by experiments/paired_runs.py (run a the
    demo, run b the full-size budgets), each system's EM and R@k in each run and, for a system
    both ran, the paired EM difference."""
    a, b = result["runs"]["a"]["systems"], result["runs"]["b"]["systems"]
    k = next((key for m in [*a.values(), *b.values()] for key in m if key.startswith("R@") and "read" not in key),
             "R@5")
    lines = [f"| system | full-size budgets: EM / {k} | demo budgets: EM / {k} | demo - full-size, EM points [95% CI], McNemar p |",
             "|---|---:|---:|---|"]

    def cell(m: dict[str, Any] | None) -> str:
        return "-" if m is None else f"{100 * m['EM']:.1f} / {100 * m[k]:.1f}"

    for name in [*b, *(n for n in a if n not in b)]:
        p = result["paired"].get(name)
        diff = ("not run by both" if p is None else
                f"{100 * p['delta']:+.1f} [{100 * p['ci95'][0]:+.1f}, {100 * p['ci95'][1]:+.1f}], p {p['mcnemar_p']:.2g}")
        lines.append(f"| {name} | {cell(b.get(name))} | {cell(a.get(name))} | {diff} |")
    questions = next(iter(result["paired"].values()))["questions"] if result["paired"] else 0
    lines += ["", f"SQuAD-open test, {questions:,} questions, the same in both runs; 95% bootstrap intervals over "
              "questions."]
    return "\n".join(lines)


TABLES: dict[str, Callable[[Result], str]] = {
    "realm_mechanism": realm_mechanism_table,
    "realm_mechanism_small": realm_mechanism_table,
    "realm_mechanism_gpu": realm_mechanism_table,
    "realm_reading_gain": realm_reading_table,
    "openqa_summary": openqa_summary_table,
    "realm_table": pretrain_table,
    "openqa": openqa_table,
    "openqa_bm25": openqa_table,
    "openqa_bm25_2ep": openqa_table,
    "openqa_bf16": openqa_table,
    "openqa_ict_open_test": open_phase_table,
    "warm_start": warm_start_table,
    "answer_lengths": answer_lengths_table,
    "demo_cuts": demo_cuts_table,
    "pretrain": realm_gain_table,
    "openqa_gain": openqa_table,
}
# a block rendered from another block's result file: {block name: result file name}
SOURCES = {"openqa_summary": "openqa"}
# blocks rendered from several result files at once: {block name: renderer}
COLLECTIONS: dict[str, Callable[[], str]] = {"reader_studies": reader_studies_table,
                                             "reader_errors": reader_errors_table,
                                             "query_phase": query_phase_table}
