from pathlib import Path

from ablations import table2

from realm_core.config import load_config

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
