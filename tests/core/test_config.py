from pathlib import Path

import pytest

from realm_core.config import (
    BLOCK_VIEWS,
    PRECISION_STAGES,
    ChunkConfig,
    PipelineConfig,
    load_config,
)
from realm_core.errors import ConfigError
from realm_core.presets import PRESETS


def test_paper_preset_has_realm_settings() -> None:
    cfg = load_config("paper")
    assert cfg.chunk.max_wordpieces == 288
    assert cfg.chunk.encoder == "bert-base-uncased"
    p = cfg.pretrain
    assert (p.top_k, cfg.masking.query_length, p.reader_length, p.batch_size) == (8, 96, 384, 512)
    assert p.reader_encoder == cfg.ict.encoder == "bert-base-uncased" and p.dropout == 0.1
    assert (p.learning_rate, p.steps, p.refresh_every) == (3e-5, 200_000, 500)
    i = cfg.ict
    assert (i.batch_size, i.learning_rate, i.steps, i.keep_sentence_prob) == (4096, 1e-4, 100_000, 0.1)


def test_every_preset_validates() -> None:
    for name in PRESETS:
        assert load_config(name).preset == name


def test_one_block_length_is_every_stage_view_unless_a_stage_sets_its_own() -> None:
    paper = load_config("paper")
    assert set(paper.block_views().values()) == {288}  # REALM: one view of a block everywhere
    cfg = load_config("paper", overrides=["block_length=192"])
    assert cfg.block_views() == {f"{s}.{f}": 192 for s, f in BLOCK_VIEWS.items()}
    # the chunk and the pretraining stage configs (and so their cache keys) follow it
    assert cfg.chunk.config_hash() != paper.chunk.config_hash()
    assert cfg.pretrain.config_hash() != paper.pretrain.config_hash()
    own = load_config("paper", overrides=["block_length=192", "ict.block_length=64"])
    assert own.ict.block_length == 64 and own.embed.max_length == 192
    # the demo's shorter views are its own fields; its blocks and index read 288
    demo = load_config("demo").block_views()
    assert (demo["chunk.max_wordpieces"], demo["embed.max_length"], demo["ict.block_length"],
            demo["pretrain.doc_length"]) == (288, 288, 64, 288)
    # a section given as a config object: only the fields it did not set follow block_length
    built = PipelineConfig(preset="x", block_length=100, ingest=load_config("tiny").ingest,
                           chunk=ChunkConfig(batch_documents=8))
    assert built.chunk.max_wordpieces == 100 and built.chunk.batch_documents == 8
    pinned = PipelineConfig(preset="x", block_length=100, ingest=load_config("tiny").ingest,
                            chunk=ChunkConfig(max_wordpieces=64))
    assert pinned.chunk.max_wordpieces == 64
    with pytest.raises(ConfigError, match="block_length"):
        load_config("tiny", overrides=["block_length=8"])


def test_one_precision_is_every_encoder_stages_unless_a_stage_sets_its_own() -> None:
    stages = PRECISION_STAGES
    demo, tiny = load_config("demo"), load_config("tiny")
    assert demo.precision == "auto" and {getattr(demo, s).precision for s in stages} == {"auto"}
    assert tiny.precision == "fp32" and {getattr(tiny, s).precision for s in stages} == {"fp32"}
    fp32 = load_config("demo", overrides=["precision=fp32"])
    assert {getattr(fp32, s).precision for s in stages} == {"fp32"}
    # their cache keys follow it
    assert all(getattr(fp32, s).config_hash() != getattr(demo, s).config_hash() for s in stages)
    own = load_config("demo", overrides=["precision=fp32", "ict.precision=bf16"])
    assert own.ict.precision == "bf16" and own.embed.precision == "fp32"
    paper = load_config("paper")  # its stages name their own: the reader fine-tunes in fp32
    assert (paper.ict.precision, paper.pretrain.precision, paper.finetune.precision) == ("bf16", "bf16", "fp32")
    with pytest.raises(ConfigError, match="precision"):
        load_config("demo", overrides=["precision=fp16"])


def test_overrides_are_typed_and_validated() -> None:
    cfg = load_config("tiny", overrides=["chunk.max_wordpieces=64", "ingest.workers=3"])
    assert cfg.chunk.max_wordpieces == 64 and cfg.ingest.workers == 3
    with pytest.raises(ConfigError, match="max_wordpieces"):
        load_config("tiny", overrides=["chunk.max_wordpieces=4"])
    with pytest.raises(ConfigError, match="stage.field=value"):
        load_config("tiny", overrides=["chunk.max_wordpieces"])
    with pytest.raises(ConfigError, match="unknown preset"):
        load_config("huge")
    with pytest.raises(ConfigError, match="Extra inputs"):
        load_config("tiny", overrides=["chunk.nonsense=1"])


def test_a_removed_option_is_refused_with_why_and_where(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ict.pooling was removed \(mean pooling was noise on dev"):
        load_config("tiny", overrides=["ict.pooling=cls"])  # any value: the field is gone
    old = tmp_path / "old.yaml"
    old.write_text("finetune:\n  gold_passage:\n    negatives: 1\n")
    with pytest.raises(ConfigError, match=r"old.yaml: finetune.gold_passage.negatives was removed .*Removed options"):
        load_config("tiny", old)
    load_config("tiny", overrides=["finetune.gold_passage.steps=3"])  # its siblings are untouched
    with pytest.raises(ConfigError, match=r"pretrain.copy_weight was removed \(the copy objective"):
        load_config("tiny", overrides=["pretrain.copy_weight=0"])
    with pytest.raises(ConfigError, match=r"pretrain.retriever_unfreeze_utility was removed \(the utility gate"):
        load_config("tiny", overrides=["pretrain.retriever_unfreeze_utility=0"])


def test_yaml_file_merges_over_preset(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("chunk:\n  max_wordpieces: 200\npretrain:\n  top_k: 5\n")
    cfg = load_config("demo", f, ["pretrain.top_k=6"])
    assert cfg.chunk.max_wordpieces == 200
    assert cfg.pretrain.top_k == 6
    assert cfg.pretrain.reader_length == PRESETS["demo"]["pretrain"]["reader_length"]  # untouched demo value survives


def test_config_hash_ignores_execution_fields_only() -> None:
    base = load_config("tiny").ingest
    assert base.model_copy(update={"workers": 8}).config_hash() == base.config_hash()
    assert base.model_copy(update={"rows_per_file": 7}).config_hash() != base.config_hash()
    chunk = load_config("tiny").chunk
    assert chunk.model_copy(update={"max_wordpieces": 100}).config_hash() != chunk.config_hash()
    # a nested stage config's execution fields are left out too, its other fields are not
    pretrain = load_config("tiny").pretrain
    for change, same in (({"checkpoint_every": 7}, True), ({"steps": 9}, False)):
        nested = pretrain.model_copy(update={"reader_mlm": pretrain.reader_mlm.model_copy(update=change)})
        assert (nested.config_hash() == pretrain.config_hash()) is same, change


def test_config_hash_leaves_out_where_an_encoder_is_not_what_it_is() -> None:
    """The stages that read an encoder put its content hash (the chunk stage: its tokenizer files')
    among their cache inputs, so its path is a location: a moved or copied BERT directory is the
    same key."""
    cfg = load_config("tiny")
    for stage, field in (("ict", "encoder"), ("retromae", "encoder"), ("pretrain", "reader_encoder"),
                         ("embed", "doc_encoder"), ("chunk", "encoder")):
        section = getattr(cfg, stage)
        moved = section.model_copy(update={field: "/elsewhere/bert"})
        assert moved.config_hash() == section.config_hash(), stage


@pytest.mark.parametrize(("overrides", "message"), [
    (["finetune.question_length=64", "finetune.reader_length=67"], "finetune.reader_length=67 cannot hold a "
     "finetune.question_length=64 query and one wordpiece of a block"),
    (["masking.query_length=64", "pretrain.reader_length=350"], "pretrain.reader_length=350 cuts blocks: a "
     "masking.query_length=64 query and a whole chunk.max_wordpieces=288 block need 351"),
])
def test_a_reader_too_short_for_its_query_or_a_block_is_refused_before_any_step(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("demo", overrides=overrides)
    assert load_config("demo", overrides=["finetune.question_length=64", "finetune.reader_length=68"])
    assert load_config("demo", overrides=["masking.query_length=32"]).pretrain.reader_length == 351
    assert load_config("demo", overrides=["block_length=256"]).pretrain.doc_length == 256


def test_the_gold_phase_is_keyed_by_the_span_readers_fields_only() -> None:
    """The gold-paragraph stages hash `finetune.span_reader()`: the open phase's budget never
    moves their key, a span reader field does, and a field added to FinetuneConfig must be
    placed in one phase or the other here (a new field silently left out of the gold key was the
    risk of a hand-kept field list)."""
    from realm_core.config import FinetuneConfig, SpanReaderConfig

    gold = load_config("tiny").finetune.span_reader().config_hash()
    open_phase = load_config("tiny", overrides=["finetune.steps=99", "finetune.top_k=3",
                                                "finetune.train_query_encoder=false"])
    assert open_phase.finetune.span_reader().config_hash() == gold
    assert open_phase.finetune.config_hash() != load_config("tiny").finetune.config_hash()
    for change in ("finetune.max_span_length=7", "finetune.gold_passage.steps=5", "finetune.reader_length=200"):
        assert load_config("tiny", overrides=[change]).finetune.span_reader().config_hash() != gold, change
    assert set(FinetuneConfig.model_fields) - set(SpanReaderConfig.model_fields) == {
        "reader_start", "top_k", "batch_size", "learning_rate", "query_learning_rate", "warmup_steps",
        "eval_every", "patience", "steps", "train_query_encoder"}
