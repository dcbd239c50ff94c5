"""The mechanism experiment: a knowledge corpus where the answer to every masked span is known
to sit in exactly one other block, so that whether REALM's learning signal works is a measurement,
not a guess.

Fictional entities (invented names, seeded) each get two documents that state the same facts in
independently drawn phrasings: a birthplace among 100 real city names and a birth year among
1800-1989, plus an occupation sentence with no salient span. The salient-span miner masks the
city (spaCy GPE) or the year (the date regexes); the answer to a masked sentence of one document
is in the block of the entity's other document, its *gold block*, and in no other block. Names
are built from small pools of first names and surnames, so entities share name pieces,
attributes and phrasings; spanless distractor documents add more of the same names.

Held-out entities are those whose documents pretraining holds out (`is_heldout`, the stage's
own rule): the generator picks each entity's document ids so both fall on the entity's side.
Their sentences never train; their blocks are in the index. A reader without retrieval can do no
better than the attribute's prior (`prior_accuracy`); REALM must retrieve the gold block and
copy from it. `gold_block_recall` and `gold_block_accuracy` measure the two halves apart.

Shapes: B batch, K blocks per example (null included), M masked positions, N corpus blocks,
D embedding dim, V vocabulary.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from realm_core.pretrain.batches import (
    BlockTexts,
    doc_encoder_inputs,
    retrieve_candidates,
)
from realm_core.pretrain.heldout import continuation_ids, is_heldout
from realm_core.pretrain.reading import read_blocks
from realm_core.spans.masking import MaskedExample

# spaCy's en_core_web_sm tags each as GPE in every birthplace phrasing below (checked by
# tests/core/test_mechanism.py on the generated corpus, through the span miner)
CITIES = (
    "Paris", "London", "Berlin", "Madrid", "Rome", "Vienna", "Prague", "Warsaw", "Budapest", "Lisbon",
    "Dublin", "Oslo", "Stockholm", "Helsinki", "Amsterdam", "Brussels", "Athens", "Istanbul", "Moscow",
    "Cairo", "Lagos", "Nairobi", "Casablanca", "Johannesburg", "Tokyo", "Osaka", "Kyoto", "Beijing",
    "Shanghai", "Seoul", "Bangkok", "Hanoi", "Manila", "Jakarta", "Singapore", "Mumbai", "Delhi",
    "Lahore", "Dhaka", "Tehran", "Baghdad", "Damascus", "Beirut", "Jerusalem", "Riyadh", "Dubai",
    "Toronto", "Montreal", "Vancouver", "Chicago", "Boston", "Seattle", "Denver", "Houston", "Dallas",
    "Atlanta", "Miami", "Detroit", "Philadelphia", "Baltimore", "Pittsburgh", "Cleveland", "Phoenix",
    "Portland", "Sydney", "Melbourne", "Brisbane", "Auckland", "Wellington", "Lima", "Bogota", "Caracas",
    "Quito", "Havana", "Milan", "Naples", "Turin", "Venice", "Munich", "Hamburg", "Frankfurt", "Cologne",
    "Zurich", "Geneva", "Barcelona", "Seville", "Edinburgh", "Liverpool", "Birmingham", "Leeds",
    "Belfast", "Oxford", "Cambridge", "Antwerp", "Sofia", "Belgrade", "Zagreb", "Tallinn", "Minsk", "Kazan",
)
YEARS = tuple(range(1800, 1990))
OCCUPATIONS = ("cartographer", "weaver", "glassblower", "astronomer", "bookbinder", "ferryman", "botanist",
               "clockmaker", "surveyor", "luthier", "brewer", "engraver", "tanner", "archivist", "cooper",
               "shipwright", "apothecary", "chandler", "mason", "falconer")
HOBBIES = ("chess", "sailing", "beekeeping", "fencing", "rowing", "falconry", "archery", "calligraphy")
# each a paraphrase of one fact; a document draws one per fact, independently of its partner
BIRTHPLACE = ("{name} was born in {city}.", "{name} is a native of {city}.",
              "The birthplace of {name} was {city}.", "{name} grew up in {city} as a child.")
BIRTH_YEAR = ("{name} was born in {year}.", "In {year}, {name} was born.",
              "{name} was born in the year {year}.", "The birth of {name} came in {year}.")
OCCUPATION = ("{name} worked as a {job}.", "By trade {name} was a {job}.", "{name} earned a living as a {job}.")
DISTRACTOR = ("{name} worked as a {job} and was fond of {hobby}.", "{name}, a {job}, spent free days on {hobby}.")
_ONSETS = ("b", "d", "g", "k", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "th", "vr", "zh")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")
_CODAS = ("", "n", "r", "l", "th", "sk", "m", "x")


@dataclass(frozen=True)
class Entity:
    name: str
    city: str
    year: int
    job: str
    heldout: bool
    doc_ids: tuple[str, str]   # native ids of its two documents (ingest prefixes the source name)


@dataclass(frozen=True)
class SyntheticCorpus:
    entities: tuple[Entity, ...]
    documents: tuple[dict[str, str], ...]   # {"id", "title", "text"}: the JSONL rows, in order
    source: str

    def partner(self) -> dict[str, str]:
        """Full doc id (as ingest writes it) -> the full doc id of the same entity's other document."""
        out = {}
        for e in self.entities:
            a, b = (f"{self.source}:{d}" for d in e.doc_ids)
            out[a], out[b] = b, a
        return out

    def answers(self) -> dict[str, tuple[str, str]]:
        """Full doc id -> the facts its sentences state (city, year): the only spans with a gold block."""
        out = {}
        for e in self.entities:
            for d in e.doc_ids:
                out[f"{self.source}:{d}"] = (e.city, str(e.year))
        return out

    def write_jsonl(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(d) + "\n" for d in self.documents))
        tmp.replace(path)
        return path

    def summary(self) -> dict[str, Any]:
        return {"entities": len(self.entities), "heldout_entities": sum(e.heldout for e in self.entities),
                "documents": len(self.documents), "first_names": len({e.name.split()[0] for e in self.entities}),
                "surnames": len({e.name.split()[1] for e in self.entities})}


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                   for _ in range(syllables)).capitalize()


def _pool(rng: random.Random, n: int) -> list[str]:
    words: dict[str, None] = {}
    while len(words) < n:
        words[_word(rng, rng.choice((2, 2, 3)))] = None
    return list(words)


def _doc_ids(slug: str, heldout: bool, every: int, source: str) -> tuple[str, str]:
    """Two native ids whose full ids are both held out (or both not) under `is_heldout`."""
    for salt in range(100_000):
        ids = (f"{slug}-{salt}-a", f"{slug}-{salt}-b")
        if all(is_heldout(f"{source}:{d}", every) == heldout for d in ids):
            return ids
    raise RuntimeError(f"no document ids for {slug} on the {'held-out' if heldout else 'training'} side")


def make_corpus(entities: int, distractors: int, seed: int, heldout_every: int,
                heldout_fraction: float = 0.25, source: str = "synthetic") -> SyntheticCorpus:
    """The corpus as a function of its arguments: the same seed writes the same bytes."""
    rng = random.Random(seed)
    side = max(4, round((1.5 * (entities + distractors)) ** 0.5))  # small pools: names share pieces
    firsts, lasts = _pool(rng, side), _pool(rng, side + 3)
    names = [f"{f} {s}" for f in firsts for s in lasts]
    if len(names) < entities + distractors:
        raise ValueError(f"{entities + distractors} names asked of pools giving {len(names)}")
    rng.shuffle(names)
    held = set(rng.sample(range(entities), round(entities * heldout_fraction)))
    out: list[Entity] = []
    docs: list[dict[str, str]] = []
    for i in range(entities):
        name = names[i]
        e = Entity(name, rng.choice(CITIES), rng.choice(YEARS), rng.choice(OCCUPATIONS), i in held,
                   _doc_ids(f"e{i:05d}", i in held, heldout_every, source))
        out.append(e)
        for doc_id, title in zip(e.doc_ids, (name, f"{name}, a record"), strict=True):
            facts = [rng.choice(BIRTHPLACE).format(name=name, city=e.city),
                     rng.choice(BIRTH_YEAR).format(name=name, year=e.year),
                     rng.choice(OCCUPATION).format(name=name, job=e.job)]
            rng.shuffle(facts)
            docs.append({"id": doc_id, "title": title, "text": " ".join(facts)})
    for j in range(distractors):
        name = names[entities + j]
        text = rng.choice(DISTRACTOR).format(name=name, job=rng.choice(OCCUPATIONS), hobby=rng.choice(HOBBIES))
        docs.append({"id": f"d{j:05d}", "title": name, "text": text})
    order = list(range(len(docs)))
    rng.shuffle(order)
    return SyntheticCorpus(tuple(out), tuple(docs[k] for k in order), source)


def fact_examples(examples: Sequence[MaskedExample], corpus: SyntheticCorpus, tokenizer: Any) -> list[bool]:
    """Whether each example masks one of its document's facts. spaCy tags a few invented names as
    places (about 2% of GPE spans); those examples train like any other but have no gold block,
    so the measurements leave them out and count them."""
    answers = corpus.answers()
    pieces: dict[str, list[int]] = {}
    out = []
    for e in examples:
        facts = answers.get(e.doc_id, ())
        for a in facts:
            if a not in pieces:
                pieces[a] = tokenizer(a, add_special_tokens=False)["input_ids"]
        out.append(any(e.targets == pieces[a] for a in facts))
    return out


def gold_blocks(examples: Sequence[MaskedExample], blocks: BlockTexts, partner: dict[str, str]) -> np.ndarray:
    """(B,) the block of each example's entity's other document (one block a document)."""
    block_of: dict[str, int] = {}
    for z, doc in enumerate(blocks.doc_ids):
        if doc in block_of:
            raise ValueError(f"document {doc} was cut into more than one block; the mechanism "
                             "corpus needs one block a document (raise chunk.max_wordpieces)")
        block_of[doc] = z
    return np.asarray([block_of[partner[e.doc_id]] for e in examples], dtype=np.int64)


def prior_accuracy(train: Sequence[MaskedExample], heldout: Sequence[MaskedExample]) -> float:
    """What a reader that never sees a block can reach: for each held-out example, the answer most
    frequent in training among answers of the same wordpiece length (a reader sees how many
    [MASK]s there are)."""
    by_length: dict[int, Counter[tuple[int, ...]]] = {}
    for e in train:
        by_length.setdefault(len(e.targets), Counter())[tuple(e.targets)] += 1
    hits = 0
    for e in heldout:
        counts = by_length.get(len(e.targets))
        if counts and counts.most_common(1)[0][0] == tuple(e.targets):
            hits += 1
    return hits / max(len(heldout), 1)


def embed_blocks(doc_encoder: Any, blocks: BlockTexts, tokenizer: Any, doc_length: int,
                 batch_size: int = 64) -> np.ndarray:
    """(N, D) every block embedded by `doc_encoder`, as the index embeds them, on the device its
    weights are on."""
    import torch

    from realm_core.distributed import module_device

    doc_encoder.eval()
    device = module_device(doc_encoder)
    out = []
    with torch.no_grad():
        for start in range(0, len(blocks), batch_size):
            ids = np.arange(start, min(start + batch_size, len(blocks)))
            inputs = {name: t.to(device) for name, t in doc_encoder_inputs(ids, blocks, tokenizer, doc_length).items()}
            out.append(doc_encoder(**inputs).float().cpu().numpy())
    return np.concatenate(out)


def gold_block_recall(query_encoder: Any, block_vectors: np.ndarray, examples: Sequence[MaskedExample],
                      gold: np.ndarray, blocks: BlockTexts, pad_id: int, exclusion: str, k: int = 1,
                      batch_size: int = 64) -> float:
    """Fraction of examples whose gold block is among the top `k` by exact inner product, after
    the trivial retrievals pretraining drops (REALM §3.4); the queries embedded on the device the
    encoder's weights are on."""
    import torch

    from realm_core.distributed import module_device
    from realm_core.retrieval.embed import pad_sequences

    query_encoder.eval()
    device = module_device(query_encoder)
    hits = 0
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            chunk = list(examples[start:start + batch_size])
            ids, mask = pad_sequences([e.input_ids for e in chunk], pad_id)
            q = query_encoder(ids.to(device), mask.to(device)).float().cpu().numpy()  # (B, D)
            ranked = np.argsort(-(q @ block_vectors.T), axis=1)[:, :k + 8]  # (B, k+8)
            top = retrieve_candidates(ranked, chunk, blocks, k, exclusion)  # (B, k)
            hits += int((top == gold[start:start + len(chunk), None]).any(1).sum())
    return hits / max(len(examples), 1)


def gold_block_accuracy(reader: Any, examples: Sequence[MaskedExample], gold: np.ndarray,
                        blocks: BlockTexts, tokenizer: Any, reader_length: int,
                        batch_size: int = 16) -> tuple[float, float]:
    """(gold, null): the fraction of examples whose every masked wordpiece the reader predicts
    reading the gold block alone (what the reader can do once retrieval is right) and reading the
    null block alone (what it does without retrieval: at the prior where facts are not memorised)."""
    reading = read_blocks(reader, examples, gold, blocks, tokenizer, reader_length, continuation_ids(tokenizer),
                          batch_size)
    if not len(examples):
        return 0.0, 0.0
    return float(reading.block_correct.mean()), float(reading.null_correct.mean())
