"""`realm inspect`, `realm config`, `realm stages`, `realm pipeline`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, cast

import typer
from rich.table import Table

from flows.cli.common import ConfigFile, Dask, Force, Overrides, Preset, Root, app, errors, out


@app.command()
def inspect(artifact: Annotated[str, typer.Argument(help="artifact directory (or fsspec URL)")],
            rows: Annotated[int, typer.Option(help="sample rows to show per table")] = 3) -> None:
    """Show an artifact's manifest, row counts and a few sample rows."""
    from realm_core.store.artifacts import ArtifactStore

    with errors():
        store = ArtifactStore(str(Path(artifact).parent) if "://" not in artifact else artifact)
        art = store.open(artifact)
        m = art.manifest
        summary = {k: m.get(k) for k in ("kind", "schema_version", "content_hash", "config_hash",
                                          "package_version", "created_at", "rows", "inputs")}
        out.print_json(json.dumps(summary))
        if m.get("stats"):
            out.print_json(json.dumps({"stats": m["stats"]}))
        for table in m["rows"]:
            sample = art.read_table(table).slice(0, rows).to_pylist()
            t = Table(title=f"{table}: {m['rows'][table]} rows")
            for col in (sample[0] if sample else {}):
                t.add_column(col, overflow="fold", max_width=60)
            for r in sample:
                t.add_row(*[(str(v)[:200] + "…") if len(str(v)) > 200 else str(v) for v in r.values()])
            out.print(t)


@app.command()
def verify(root: Root = None,
           sizes_only: Annotated[bool, typer.Option("--sizes-only", help="check each file's size, not its "
                                                                          "sha256 (what object storage checks on a hit)")] = False,
           json_out: Annotated[Path | None, typer.Option("--json", help="also write the report as JSON here")] = None) -> None:
    """Check every published artifact under the root, and every version of its knowledge corpus,
    against its manifest (each file present, of its size and, unless --sizes-only, of its sha256)
    and report what each check cost. A cache
    hit runs the same check on the artifact it serves; this one reads the whole store.
    Exits 2 naming each damaged artifact (recompute it with --force on its stage).

    Example: realm verify --root work/artifacts"""
    import time

    from flows.cli.common import write_json
    from realm_core.config import work_dir
    from realm_core.errors import CorruptArtifactError, RealmError
    from realm_core.knowledge.versions import FOLDER, KnowledgeCorpus
    from realm_core.store.artifacts import MANIFEST, ArtifactStore

    with errors():
        where = str(root or work_dir() / "artifacts")
        if "://" not in where and not Path(where).is_dir():  # checked, not created
            raise RealmError(f"{where}: expected an artifact store (a folder of artifacts), found none")
        store = ArtifactStore(where)
        mode = "size" if sizes_only else "content"
        manifests = sorted(store.fs.glob(f"{store.root}/*/*/{MANIFEST}"))
        if not manifests:
            raise RealmError(f"{store.root}: no published artifacts to verify")
        damaged, total_bytes = [], 0
        t0 = time.perf_counter()
        knowledge = f"{str(store.root).rstrip('/')}/{FOLDER}/"
        for manifest in manifests:
            path = manifest.rsplit("/", 1)[0]
            try:
                if path.startswith(knowledge):  # a knowledge corpus version: its own manifest form
                    number = int(path.rsplit("/", 1)[1][1:])
                    total_bytes += KnowledgeCorpus(Path(knowledge)).version(number).verify(sizes_only)
                else:
                    total_bytes += store.open(path).verify(mode)
            except CorruptArtifactError as e:
                damaged.append(str(e))
        seconds = time.perf_counter() - t0
        report = {"root": str(store.root), "mode": mode, "artifacts": len(manifests), "bytes": total_bytes,
                  "seconds": round(seconds, 2), "mb_per_s": round(total_bytes / 2**20 / max(seconds, 1e-9), 1),
                  "damaged": damaged}
        write_json(json_out, report)
        out.print(f"{len(manifests):,} artifact{'s' if len(manifests) != 1 else ''}, {total_bytes / 2**20:,.1f} MiB checked by {mode} in "
                  f"{seconds:.2f} s ({report['mb_per_s']:,.0f} MiB/s)")
        if damaged:
            raise RealmError(f"{len(damaged)} damaged artifact(s); recompute each with --force on its stage:\n  "
                             + "\n  ".join(damaged))
        out.print("every artifact matches its manifest")


@app.command("config")
def show_config(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None) -> None:
    """Print the resolved configuration (preset + YAML + overrides) and each section's hash."""
    with errors():
        from realm_core.config import load_config
        from realm_core.config.stage import StageConfig

        cfg = load_config(preset, config, overrides or [])
        out.print_json(cfg.model_dump_json())
        for name in type(cfg).model_fields:
            if isinstance(section := getattr(cfg, name), StageConfig):
                out.print(f"{name}: config hash {section.config_hash()[:16]}")


@app.command()
def stages(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None) -> None:
    """The stage graph for this config: each stage, the config sections it reads and the stages it needs, in the order the pipeline runs them."""
    with errors():
        from realm_core.config import load_config
        from realm_core.graph.stages import PIPELINE_TARGETS, STAGES, closure

        cfg = load_config(preset, config, overrides or [])
        in_pipeline = set(closure(cfg, PIPELINE_TARGETS))
        t = Table(title=f"stages ({preset})")
        for col in ("stage", "reads", "needs", "in the pipeline"):
            t.add_column(col)
        for s in STAGES:
            t.add_row(s.name, ", ".join(s.sections), ", ".join(s.upstream(cfg)) or "-",
                      "yes" if s.name in in_pipeline else "no")
        out.print(t)


@app.command()
def pipeline(preset: Preset = "demo", config: ConfigFile = None, overrides: Overrides = None,
             root: Root = None, force: Force = False, dask: Dask = None,
             verbose: Annotated[bool, typer.Option("--verbose", "-v", help="also print Prefect's tracebacks "
                                                                           "of a failed stage")] = False) -> None:
    """Run the whole pipeline as the Prefect flow `realm` with an embedded Prefect (no server). Killed (any signal, SIGKILL included), it leaves no process behind; run it again and every stage resumes from its cache or newest checkpoint."""
    with errors():
        from realm_core.config import load_config

        load_config(preset, config, overrides or [])  # a bad --set fails here, before Prefect starts
        from flows import prefect_home, quiet_prefect_failures
        from flows.supervise import supervise

        supervise()  # the run, its Prefect server and workers end together, whatever ends them

        prefect_home()
        from flows.pipeline import full_pipeline
        from flows.settings import PresetName

        if not verbose:
            quiet_prefect_failures()

        result = full_pipeline(preset=cast(PresetName, preset), config_file=str(config) if config else None,
                               overrides=overrides or [], root=root, force=force, dask=dask)
        out.print_json(json.dumps(result))


@app.command()
def record(preset: Preset = "laptop", config: ConfigFile = None, overrides: Overrides = None, root: Root = None,
           json_out: Annotated[Path | None, typer.Option("--json", help="write the record here (default: "
                                                          "<work>/reports/record-<preset>.json)")] = None) -> None:
    """The record of a finished `realm pipeline` run of a preset that compares REALM with null-only (laptop, gpu): each stage's seconds, the held-out gain with its intervals, zero-shot recall, Table 1 with paired EM intervals and McNemar p. Read from the run's artifacts; nothing is trained (a stage missing from the store is an error).

    Example: realm record --preset laptop --json bench/results/laptop.json"""
    with errors():
        from flows.record import run_record, stage_seconds
        from realm_core.config import load_config, work_dir
        from realm_core.errors import MissingArtifactError
        from realm_core.store.artifacts import ArtifactStore

        cfg = load_config(preset, config, overrides or [])
        store_root = root or str(work_dir() / "artifacts")
        reports = Path(store_root).parent / "reports"
        try:
            result = run_record(cfg, ArtifactStore(store_root), stage_seconds(reports, preset))
        except MissingArtifactError as e:
            raise MissingArtifactError(f"{e}; run `realm pipeline --preset {preset}` to its end first") from None
        target = json_out or reports / f"record-{preset}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        tmp.replace(target)
        g = result["heldout"]["gain"]
        out.print(f"{preset}: REALM - null-only on {result['heldout']['examples']:,} held-out spans "
                  f"{100 * g['accuracy_delta']:+.1f} points [{100 * g['accuracy_ci95'][0]:+.1f}, "
                  f"{100 * g['accuracy_ci95'][1]:+.1f}]; wrote {target}")
