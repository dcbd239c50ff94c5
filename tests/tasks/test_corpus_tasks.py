from pathlib import Path

from realm_core.config import load_config
from tasks.corpus import chunk_blocks, ingest_documents


def test_tasks_return_refs_and_hit_the_cache(shared_data: Path, tmp_path: Path) -> None:
    cfg = load_config("tiny")
    root = str(tmp_path / "art")
    first = ingest_documents.fn(cfg.ingest, root)
    assert first["cached"] is False and first["ref"].kind == "documents"
    again = ingest_documents.fn(cfg.ingest, root)
    assert again["cached"] is True and again["ref"] == first["ref"]
    blocks = chunk_blocks.fn(first["ref"], cfg.chunk, root)
    assert blocks["ref"].kind == "blocks" and blocks["stats"]["documents"] == 70
