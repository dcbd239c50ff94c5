"""The full pipeline: the flow `realm`, deployed as realm/full-pipeline. Stages run as subflows
and pass artifact references (path + content hash), never data."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from flows.ingest_corpus import chunk_blocks, ingest_corpus
from flows.mine_salient_spans import mine_salient_spans
from flows.openqa import evaluate_openqa
from flows.pretrain_realm import pretrain_realm
from flows.refresh_index import refresh_index
from flows.settings import resolve
from flows.warm_start import evaluate_retrieval, warm_start_ict, warm_start_retromae
from realm_core.retrieval.warm_start import doc_encoder_dir


def summary_markdown(preset: str, stages: dict[str, dict[str, Any]]) -> str:
    lines = [f"# realm pipeline ({preset})", "",
             "| stage | cache | seconds | artifact |", "|---|---|---|---|"]
    for name, r in stages.items():
        lines.append(f"| {name} | {'hit' if r['cached'] else 'computed'} | {r['seconds']:.1f} | "
                     f"`{r['ref'].path}` |")
    return "\n".join(lines)


@flow(name="realm", log_prints=True)
def full_pipeline(preset: str = "demo", config_file: str | None = None,
                  overrides: list[str] | None = None, root: str | None = None,
                  dask: str | None = None) -> dict[str, Any]:
    """Run every stage on one config. Each stage is cached on its inputs' content hashes plus
    its config, so a rerun recomputes only what changed downstream. `dask` (local:N or a
    scheduler address) fans ingestion, span mining and block embedding out over Dask workers;
    the artifacts are the ones one process makes."""
    cfg, root = resolve(preset, config_file, overrides, root)
    print(f"config: {cfg.model_dump_json()}")
    stages: dict[str, dict[str, Any]] = {}
    stages["ingest"] = ingest_corpus(config=cfg.ingest, root=root, dask=dask)
    stages["chunk"] = chunk_blocks(documents=stages["ingest"]["ref"], config=cfg.chunk, root=root)
    stages["spans"] = mine_salient_spans(blocks=stages["chunk"]["ref"], config=cfg.spans, root=root, dask=dask)
    stages["warm_start"] = warm_start_ict(blocks=stages["chunk"]["ref"], spans=stages["spans"]["ref"],
                                          config=cfg.ict, root=root)
    # REALM §3.4: the first index is built with the warm-started document encoder
    embed = cfg.embed.model_copy(update={"doc_encoder": doc_encoder_dir(stages["warm_start"]["ref"])})
    refreshed = refresh_index(blocks=stages["chunk"]["ref"], embed=embed, index=cfg.index, root=root, dask=dask)
    stages["embed"], stages["index"] = refreshed["embed"], refreshed["index"]
    stages["retrieval_eval"] = evaluate_retrieval(
        blocks=stages["chunk"]["ref"], retriever=stages["warm_start"]["ref"], embed=cfg.embed,
        ict=cfg.ict, config=cfg.retrieval_eval, root=root)
    # ICT is the open-QA baseline whatever REALM starts from; RetroMAE is trained when asked for
    pretrain_retriever = stages["warm_start"]["ref"] if cfg.pretrain.warm_start == "ict" else None
    if cfg.pretrain.warm_start == "retromae":
        stages["warm_start_retromae"] = warm_start_retromae(blocks=stages["chunk"]["ref"],
                                                            config=cfg.retromae, root=root)
        pretrain_retriever = stages["warm_start_retromae"]["ref"]
    stages["pretrain"] = pretrain_realm(
        blocks=stages["chunk"]["ref"], spans=stages["spans"]["ref"], retriever=pretrain_retriever,
        config=cfg.pretrain, masking=cfg.masking, embed=cfg.embed, index=cfg.index, root=root)
    # REALM Table 1: every system fine-tuned with the same budget, then evaluated side by side
    qa = evaluate_openqa(systems=None if cfg.pretrain.retrieval == "realm" else ["none", "bm25", "ict"],
                         preset=preset, config_file=config_file, overrides=overrides, root=root,
                         blocks=stages["chunk"]["ref"], retriever=stages["warm_start"]["ref"],
                         realm_model=stages["pretrain"]["ref"] if cfg.pretrain.retrieval == "realm" else None)
    stages |= qa.pop("stages")
    stages["openqa_eval"] = qa
    md = summary_markdown(preset, stages)
    create_markdown_artifact(markdown=md, key="realm-pipeline", description="stage summary")
    md += "".join(f"\n\n## {name}\n\n{r['report']}" for name, r in stages.items() if r.get("report"))
    reports = Path(root).parent / "reports" if "://" not in root else None
    report_path = None
    if reports is not None:
        reports.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        report_path = reports / f"pipeline-{preset}-{stamp}.md"
        report_path.write_text(md + "\n")
    return {"preset": preset, "root": root, "report": str(report_path) if report_path else None,
            "stages": {k: {"artifact": v["ref"].path, "cached": v["cached"],
                           "seconds": round(v["seconds"], 2), "stats": v["stats"]}
                       for k, v in stages.items()}}
