from pathlib import Path

from realm_core.config import load_config
from realm_core.pretrain.ablations import table2

# the budgets `make realm-table` runs at
TABLE2 = Path(__file__).resolve().parents[2] / "experiments" / "configs" / "realm_table.yaml"


def test_every_table2_row_is_a_config_with_its_own_cache_key() -> None:
    base = load_config("demo", TABLE2)
    rows = table2(base)
    assert list(rows)[:2] == ["REALM", "null only (BERT baseline)"] and len(rows) == 7
    keys = set()
    for name, overrides in rows.items():
        cfg = load_config("demo", TABLE2, list(overrides))
        # what the pretraining stage's key is made of, besides the upstream artifacts' hashes
        keys.add((cfg.pretrain.config_hash(), cfg.masking.config_hash()))
        changed = {s for s in ("pretrain", "masking") if getattr(cfg, s) != getattr(base, s)}
        assert len(changed) == (0 if name == "REALM" else 1), name
    assert len(keys) == len(rows)
    assert load_config("demo", TABLE2, list(rows["30x staler index (refresh every 600)"])).pretrain.refresh_every == 600
    assert load_config("demo", TABLE2, list(rows["retriever lr 1.0x"])).pretrain.retriever_lr_scale == 1.0
    assert load_config("demo", TABLE2, list(rows["relevance index"])).pretrain.relevance == "index"


def test_a_pair_with_the_copy_objective_shares_the_null_only_run_of_one_without() -> None:
    """The copy term reads retrieved blocks, which a null-only run has none of: its key is the one
    without the term, so `make realm-gain GAIN_SET="--set pretrain.copy_weight=1"` does not train
    the same null-only run again (40 minutes on the demo corpus); REALM's row is a run of its own."""
    from realm_core.graph import null_only

    plain, copying = load_config("demo", TABLE2), load_config("demo", TABLE2, ["pretrain.copy_weight=1"])
    assert null_only(copying).pretrain.copy_weight == 1.0
    assert null_only(copying).pretrain.config_hash() == null_only(plain).pretrain.config_hash()
    assert copying.pretrain.config_hash() != plain.pretrain.config_hash()
    weighted = load_config("demo", TABLE2, ["pretrain.copy_weight=1", "pretrain.null_weight=0.5"])
    assert null_only(weighted).pretrain.config_hash() != null_only(plain).pretrain.config_hash()
    # the same key where the pretrain config is hashed inside the config that holds it
    assert null_only(copying).config_hash() == null_only(plain).config_hash()
    assert copying.config_hash() != plain.config_hash()
    # and the loop, the stage's tables and its report read the same fact: off in a null-only run
    assert "copy_weight" in null_only(copying).pretrain.inert_fields()
    assert not copying.pretrain.inert_fields()
    assert copying.pretrain.copies and not null_only(copying).pretrain.copies and not plain.pretrain.copies
