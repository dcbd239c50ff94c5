"""The base of every stage config and the constants several stages share.

A stage config is plain data, validated at the boundary; its hash (`config_hash`) goes into
every artifact's manifest and cache key. `realm_core.config` gathers the stages and loads presets.
"""

from __future__ import annotations

import hashlib
import json
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

BUNDLED_ENCODER = "bundled:all-MiniLM-L6-v2"

DEVICE_DEFAULT = "auto"
DEVICE_HELP = ("auto: this process's GPU (its torchrun local rank) where CUDA is available, else "
               "the CPU; or cpu, cuda, cuda:N")
PRECISION_HELP = ("bf16: autocast matrix products to bfloat16 (weights and optimizer stay fp32); auto: bf16 where "
                  "the device computes it natively (a GPU with bf16, a CPU with AVX512-BF16 or AMX), else fp32")
INT8_HELP = ("; int8 (inference only, on a CPU): the encoder's linear layers in int8 dynamic quantization, "
             "what it costs in recall and EM and gains in speed measured by bench/quantize.py "
             "(docs/experiments/quantization.md)")


class StageConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # Fields that change how fast a stage runs but never what it produces; left out of the hash
    # so that rerunning with more workers is still a cache hit.
    EXECUTION_FIELDS: ClassVar[frozenset[str]] = frozenset()
    # Fields that say where an input is, not what it is: left out of the hash because every stage
    # that reads one puts the input's content hash among its cache inputs, so that a store that
    # is copied or moved (a path inside it changes) still hits its cache.
    LOCATION_FIELDS: ClassVar[frozenset[str]] = frozenset()
    # Options added after artifacts were keyed without them: left out of the hash while they hold
    # their default, so a config that does not use the option keeps every key it had.
    HASHED_WHEN_SET: ClassVar[frozenset[str]] = frozenset()

    def hash_exclude(self) -> dict[str, object]:
        """The execution and location fields of this config and of the stage configs nested in
        it, and its `HASHED_WHEN_SET` fields at their defaults, as pydantic's `exclude` mapping
        (a nested warm-up's checkpoint interval is one)."""
        at_default = {f for f in self.HASHED_WHEN_SET if getattr(self, f) == type(self).model_fields[f].default}
        out: dict[str, object] = dict.fromkeys(self.EXECUTION_FIELDS | self.LOCATION_FIELDS | at_default, True)
        for name in type(self).model_fields:
            value = getattr(self, name)
            if name not in out and isinstance(value, StageConfig) and (nested := value.hash_exclude()):
                out[name] = nested
        return out

    def config_hash(self) -> str:
        """sha256 of the canonical JSON of this config (field order independent)."""
        data = self.model_dump(mode="json", exclude=self.hash_exclude())  # type: ignore[arg-type]
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()
