"""The pipeline, declared once.

Each stage names the config sections it reads, the stages upstream of it (which may depend on
the config: pretraining starts from the warm start `pretrain.warm_start` names) and its runner,
a call into realm_core. `Resolver` returns a stage's result through the artifact cache,
resolving its upstream stages first. The command line, the Prefect flows and the benchmarks
all resolve stages here and differ only in the hook that calls a runner: a plain call in the
CLI and the benchmarks, a Prefect task in the flows. The stage order lives in `STAGES` and
nowhere else.

Modules: `stages` (what the pipeline is: each stage, its upstream and runner, `STAGES`, and the
Prefect flows that own them, `STAGE_FLOWS`) and `resolver` (how a stage is run: `Resolver`, the
hooks, `StageRun`).
"""
