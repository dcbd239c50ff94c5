"""The open-QA systems, each declared once: REALM Table 1's rows, the 2x2 that crosses ICT's or
REALM's encoders with the baseline or REALM's reader, and the reader of the null-only pretraining
run (REALM Table 2's BERT baseline) behind ICT's encoders, which shows what retrieval during
pretraining does for the reader apart from more masked LM.

Config validation, the stage graph (a fine-tuning stage per system, its upstream), fine-tuning,
evaluation, `realm search/ask/export`, the knowledge corpus and the CLI's help read this table.
Adding a system is one entry (docs/stages/open-qa.md shows one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from realm_core.errors import ConfigError

ReaderStart = Literal["baseline", "realm", "null"]


@dataclass(frozen=True)
class SystemKind:
    key: str                                  # --system, openqa_eval.systems, finetune_<key> stages
    name: str                                 # in reports and tables
    retrieval: Literal["none", "bm25", "dense"]
    encoders: str | None                      # the stage whose query and document encoders retrieve (dense)
    reader: ReaderStart                       # the span reader's start: the baseline reader, or the reader
                                              # of REALM's pretraining or of its null-only twin
    needs: tuple[str, ...]                    # its own upstream stages besides blocks, questions, reader start
    default_row: bool = False                 # in openqa_eval.systems unless a preset says otherwise
    searcher: bool = False                    # `realm search --retriever KEY` searches with its encoders
    note: str = ""

    @property
    def pretrained(self) -> bool:
        """Built from REALM pretraining's artifacts (left out when pretraining does not retrieve)."""
        return "pretrain" in self.needs

    @property
    def finetuned(self) -> bool:
        """Has a fine-tuning stage and answers `realm ask` (an extractive reader with no block
        has nothing to read)."""
        return self.retrieval != "none"


SYSTEMS: tuple[SystemKind, ...] = (
    SystemKind("none", "no retrieval", "none", None, "baseline", (), default_row=True,
               note="extractive reader, no block: nothing to extract"),
    SystemKind("bm25", "BM25 + reader", "bm25", None, "baseline", ("gold_reader",), default_row=True),
    SystemKind("ict", "ICT (ORQA-like)", "dense", "ict", "baseline", ("ict", "gold_reader"), default_row=True,
               searcher=True),
    SystemKind("realm", "REALM", "dense", "pretrain", "realm", ("ict", "pretrain", "gold_reader_realm"),
               default_row=True, searcher=True),
    SystemKind("ict_realm_reader", "ICT retriever + REALM's reader", "dense", "ict", "realm",
               ("ict", "pretrain", "gold_reader_realm")),
    SystemKind("realm_baseline_reader", "REALM's retriever + baseline reader", "dense", "pretrain", "baseline",
               ("ict", "pretrain", "gold_reader")),
    SystemKind("ict_null_reader", "ICT retriever + null-only pretrained reader", "dense", "ict", "null",
               ("ict", "pretrain_null", "gold_reader_null")),
)
BY_KEY: dict[str, SystemKind] = {s.key: s for s in SYSTEMS}
SYSTEM_KEYS: tuple[str, ...] = tuple(BY_KEY)
SYSTEM_NAMES: dict[str, str] = {s.key: s.name for s in SYSTEMS}
ASKABLE: tuple[str, ...] = tuple(s.key for s in SYSTEMS if s.finetuned)
# what `realm ask` answers with before any evaluation has ranked the systems: the first that
# needs no trained retriever
DEFAULT_ASK: SystemKind = next(s for s in SYSTEMS if s.finetuned and s.encoders is None)
REALM: SystemKind = next(s for s in SYSTEMS if s.encoders == "pretrain" and s.reader == "realm")


def system_kind(key: str, among: tuple[str, ...] = SYSTEM_KEYS) -> SystemKind:
    """The system `key`, or a ConfigError listing the keys `among` allows."""
    if key not in among:
        raise ConfigError(f"system {key!r}: expected one of {', '.join(among)}")
    return BY_KEY[key]


def check_system_keys(keys: list[str]) -> list[str]:
    for k in keys:
        system_kind(k)
    return keys


def choices(keys: tuple[str, ...] = ASKABLE) -> str:
    """`a, b or c`, for help texts."""
    return f"{', '.join(keys[:-1])} or {keys[-1]}" if len(keys) > 1 else keys[0]
