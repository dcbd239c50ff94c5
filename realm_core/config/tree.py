"""How a config tree is read from what a user gives: a preset's tree, then a YAML file deep-merged
over it, then `stage.field=value` overrides (each value parsed as YAML); options that were removed
are refused with the reason. YAML is read safely and bounded (a document whose aliases expand it
past `YAML_MAX_NODES` values is refused). Validation of the tree is `realm_core.config`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from realm_core.errors import ConfigError


def set_path(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        child = node.setdefault(k, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {k!r} is not a section")
        node = child
    node[keys[-1]] = value


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


YAML_MAX_NODES = 100_000  # nodes of a YAML document with its aliases expanded


class _BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader, refusing a document whose aliases expand it past `YAML_MAX_NODES`
    nodes: a kilobyte of nested anchors can otherwise stand for billions of values, which a
    config's validation would walk one by one."""

    def construct_document(self, node: yaml.Node) -> Any:
        sizes: dict[int, int] = {}

        def size(n: yaml.Node) -> int:  # each distinct node counted once, its expansion summed
            if id(n) not in sizes:
                sizes[id(n)] = 1  # a recursive alias counts once, not forever
                children: list[yaml.Node] = []
                if isinstance(n, yaml.SequenceNode):
                    children = list(n.value)
                elif isinstance(n, yaml.MappingNode):
                    children = [x for pair in n.value for x in pair]
                sizes[id(n)] = 1 + sum(size(c) for c in children)
                if sizes[id(n)] > YAML_MAX_NODES:
                    raise yaml.YAMLError(f"its aliases expand it past {YAML_MAX_NODES:,} values")
            return sizes[id(n)]

        size(node)
        return super().construct_document(node)


def load_yaml(text: str, where: str) -> Any:
    """A YAML document of a user's (a config file, an override's value), safe and bounded; any
    failure a ConfigError naming `where`."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506  (a SafeLoader subclass)
    except RecursionError:
        raise ConfigError(f"{where}: expected YAML, found one nested too deeply to read") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: cannot read YAML ({e})") from None


# options measured as no gain and removed with their code: a config that sets one is told why
REMOVED_OPTIONS = {
    "finetune.query_phase": "ORQA's early update never raised dev recall",
    "finetune.gold_passage.negatives": "BM25 hard negatives cost BM25 + reader on dev",
    "finetune.gold_passage.positive": "the corpus-block positive was noise on dev",
    "ict.pooling": "mean pooling was noise on dev; ICT pools [CLS]",
    "pretrain.copy_weight": "the copy objective beside REALM's loss measured no gain; the reader_copy stage "
                            "teaches the reader to copy before pretraining",
    "pretrain.retriever_unfreeze_utility": "the utility gate did not prevent the collapse onto the null block; "
                                           "the null block's fixed share (pretrain.null_weight) does",
    "pretrain.utility_window": "it only sized the removed utility gate's window",
    "pretrain.utility_standard_errors": "it only set the removed utility gate's margin",
}


def refuse_removed(tree: dict[str, Any], where: str) -> None:
    for dotted, why in REMOVED_OPTIONS.items():
        node: Any = tree
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            raise ConfigError(f"{where}: {dotted} was removed ({why}); drop it (docs/configuration.md, "
                              "'Removed options')")


def config_tree(base: dict[str, Any], yaml_path: str | Path | None, overrides: list[str] | tuple[str, ...],
                where: str) -> dict[str, Any]:
    """`base` with the YAML file at `yaml_path` merged over it and then each override set; a
    removed option anywhere in the result is a ConfigError naming `where`."""
    tree = dict(base)
    if yaml_path is not None:
        try:
            loaded = load_yaml(Path(yaml_path).read_bytes().decode("utf-8"), str(yaml_path))
        except UnicodeDecodeError as e:
            raise ConfigError(f"{yaml_path}: expected a UTF-8 YAML config, found bad bytes at byte {e.start}") from None
        except OSError as e:
            raise ConfigError(f"{yaml_path}: cannot read YAML config ({e.strerror or type(e).__name__})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{yaml_path}: expected a mapping of stage sections")
        tree = deep_merge(tree, loaded)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected stage.field=value")
        key, raw = item.split("=", 1)
        set_path(tree, key.strip(), load_yaml(raw, f"--set {item}"))
    refuse_removed(tree, where)
    return tree
