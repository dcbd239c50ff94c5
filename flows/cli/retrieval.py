"""`realm warm-start`, `realm refresh-index`, `realm evaluate-retrieval`: the retriever's stages."""

from __future__ import annotations

from typing import Annotated

import typer

from flows.cli.common import (
    ConfigFile,
    Dask,
    Force,
    JsonOut,
    Overrides,
    Preset,
    Root,
    app,
    errors,
    out,
    report,
    resolver,
    write_json,
)
from realm_core.errors import RealmError


@app.command("warm-start")
def warm_start(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
               root: Root = None, force: Force = False,
               method: Annotated[str, typer.Option(
                   help="ict (Inverse Cloze Task, ORQA) or retromae (masked auto-encoder, "
                        "settings under retromae.*)")] = "ict") -> None:
    """blocks (+ sentences) -> [bold]retriever[/]: train the query and document encoders before REALM (§3.4). ict: a sentence retrieves its own block, the rest of the batch are negatives. retromae: the block's [CLS] state must let a one-layer decoder rebuild the block (Xiao et al. 2022). Checkpoints as training goes; rerun the same command to resume.

    Examples: realm warm-start --method ict --preset demo --set ict.steps=300
              realm warm-start --method retromae --set retromae.enhanced_decoding=false"""
    with errors():
        if method not in ("ict", "retromae"):
            raise RealmError(f"--method {method!r}: expected 'ict' or 'retromae'")
        run = resolver(preset, config, overrides, root, force=[method] if force else []).run(method)
        report(f"retriever ({'ICT' if method == 'ict' else 'RetroMAE'})", run)
        out.print(run.report)


@app.command("refresh-index")
def refresh_index(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
                  root: Root = None, force: Force = False,
                  encoder: Annotated[str | None, typer.Option(
                      help="document encoder: a retriever artifact's doc_encoder dir, HF dir or bundled "
                           "name (default: embed.encoder_from: warm_start, the warm-started retriever's, "
                           "trained first if needed; latest, the newest retriever artifact's)")] = None,
                  dask: Dask = None) -> None:
    """blocks -> [bold]embeddings[/] -> [bold]index/v<step>[/]: embed every block with the document encoder and switch the index pointer to the new version atomically.

    Examples: realm refresh-index --set embed.encoder_from=latest    (what the nightly schedule runs)
              realm refresh-index --encoder work/artifacts/retriever/<key>/doc_encoder --dask local:2"""
    with errors():
        sets = list(overrides or [])
        if encoder:
            sets += [f"embed.doc_encoder={encoder}", "embed.encoder_from=config"]
        stages = resolver(preset, config, sets, root, force=["embed", "index"] if force else [], dask=dask)
        report("embeddings", stages.run("embed"))
        report("index", stages.run("index"))


@app.command("evaluate-retrieval")
def evaluate_retrieval(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
                       root: Root = None, force: Force = False, json_out: JsonOut = None) -> None:
    """Recall@1/5/20 and MRR of BM25, the untrained projection, the ICT retriever and an off-the-shelf reference, on SQuAD-open (articles 30-39 vs every block) and the DPR NQ sample (vs its passages). Trains the warm start first if it is not cached.

    Example: realm evaluate-retrieval --preset demo --json work/reports/retrieval.json"""
    with errors():
        stages = resolver(preset, config, overrides, root, force=["retrieval_eval"] if force else [])
        run = stages.run("retrieval_eval")
        report("retrieval evaluation", run)
        out.print(run.report)
        assert run.ref is not None
        manifest = stages.store.open(run.ref).manifest
        write_json(json_out, {"preset": preset, "artifact": run.ref.path, "results": manifest["results"],
                              "systems": manifest["systems"]})
