"""Pipeline parallelism as vLLM lays it out: which layers, weights and KV-cache groups each
stage holds (pure arithmetic, no Ansible, no vLLM).

Read in vLLM 0.32.0-0.34.0 (the rules are the same in the three releases):

* Layers per stage: ``vllm.distributed.utils.get_pp_indices``: ``num_layers // pp`` each;
  the remainder goes one layer each to the stages before the last, from the second-to-last
  backwards (the last stage holds the final norm and the LM head). ``VLLM_PP_LAYER_PARTITION``
  ("a,b,c", one count per stage, summing to the layer count) replaces the split: the
  ``pp_layer_partition`` option, written into the engine's environment.
* Embeddings and LM head: the LM head on the last stage (``is_last_rank``). The input
  embedding on the first stage, and on the last too where the head is tied to it (Llama,
  Qwen2/Qwen3: ``is_first_rank or (tie_word_embeddings and is_last_rank)``); the Gated
  DeltaNet families (Qwen3-Next, Qwen3.5, Qwen3.8: ``Qwen3NextModel`` / ``Qwen3_5Model``)
  build ``embed_tokens`` on EVERY stage, without a rank check.
* Speculative (MTP) drafters: built only on the last stage (``GPUModelRunner``: the
  drafter/speculator exists iff ``get_pp_group().is_last_rank``), so their attention layers
  and KV cache live there.
* KV cache (``get_kv_cache_configs``): the layers of all stages are grouped as one model
  (``get_global_kv_cache_groups``: bucket ``i`` of a kind takes ``layers[i::parts]``); each
  worker keeps the groups projected onto its own layers, and its block costs
  ``page x max(real layers of one projected group)``; each worker's ``num_blocks`` is its
  memory over that, then every worker takes the SMALLEST ``num_blocks`` of all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from .model import FULL, GDN_MODEL_TYPES, LAYER_KINDS, LINEAR, SLIDING, Geometry

MAX_PIPELINE = 64  # the largest pipeline the planner searches when it names a host count


def partitions(num_layers: int, size: int,
               partition: Sequence[int] | None = None) -> tuple[int, ...]:
    """Layers per stage, as ``get_pp_indices`` splits them (or the given partition)."""
    if partition is not None:
        return tuple(partition)
    parts = [num_layers // size] * size
    for i in range(2, num_layers % size + 2):
        parts[-i] += 1
    return tuple(parts)


def pp_indices(num_layers: int, rank: int, size: int,
               partition: Sequence[int] | None = None) -> tuple[int, int]:
    """vLLM's ``get_pp_indices``: the stage's layers as ``[start, end)``."""
    parts = partitions(num_layers, size, partition)
    start = sum(parts[:rank])
    return start, start + parts[rank]


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its decoder layers ``[start, end)`` and what else it holds."""

    rank: int
    start: int
    end: int
    kinds: Mapping[str, int]  # layer kind -> decoder layers of that kind on this stage
    mtp_layers: int  # speculative (MTP) draft layers: the last stage's
    embedding: bool  # holds the input embedding
    lm_head: bool  # holds an LM head of its own (untied, or the tied one's owner)

    @property
    def layers(self) -> tuple[int, int]:
        """(first, last) decoder layer, inclusive."""
        return self.start, self.end - 1

    @property
    def num_layers(self) -> int:
        return self.end - self.start


def layer_kinds(geo: Geometry) -> tuple[str, ...]:
    return geo.layer_types or tuple(FULL for _layer in range(geo.num_layers))


def embedding_on_every_stage(geo: Geometry) -> bool:
    """Qwen3-Next/Qwen3.5 build embed_tokens on every pipeline stage."""
    return geo.model_type in GDN_MODEL_TYPES


def split(geo: Geometry, size: int, partition: Sequence[int] | None = None,
          mtp_layers: int = 0) -> tuple[Stage, ...]:
    """The stages of a pipeline of ``size`` (1: the whole model on one stage)."""
    kinds = layer_kinds(geo)
    every = embedding_on_every_stage(geo)
    stages = []
    for rank in range(size):
        start, end = pp_indices(geo.num_layers, rank, size, partition)
        counts = {k: n for k in LAYER_KINDS if (n := kinds[start:end].count(k))}
        first, last = rank == 0, rank == size - 1
        stages.append(Stage(
            rank=rank, start=start, end=end, kinds=MappingProxyType(counts),
            mtp_layers=mtp_layers if last else 0,
            embedding=every or first or (last and geo.tie_word_embeddings),
            lm_head=last and not geo.tie_word_embeddings))
    return tuple(stages)


def stage_weights(geo: Geometry, stages: Sequence[Stage], linear_bytes: float,
                  embed_bytes: float, weights_bytes: int | None) -> tuple[int, ...]:
    """Each stage's weight bytes (all its GPUs together).

    The estimate: the layers' share of the linear weights, plus one vocab x hidden matrix
    per embedding and per untied LM head the stage holds (``embed_bytes`` is one such
    matrix). A given checkpoint size is split in the same proportions as the estimate of
    the whole model (stages that repeat the embedding hold more than their share).
    """
    estimates = [linear_bytes * s.num_layers / geo.num_layers
                 + embed_bytes * (int(s.embedding) + int(s.lm_head)) for s in stages]
    if weights_bytes is None:
        return tuple(math.ceil(e) for e in estimates)
    whole = linear_bytes + embed_bytes * (1 if geo.tie_word_embeddings else 2)
    return tuple(math.ceil(weights_bytes * e / whole) for e in estimates)


def kv_kinds(geo: Geometry, mtp_layers: int, hybrid_manager: bool) -> tuple[str, ...]:
    """Every KV-cache layer's kind, in the order vLLM registers them: the decoder layers,
    then the drafter's attention layers (sliding layers join full attention without the
    hybrid manager)."""
    kinds = [*layer_kinds(geo), *[FULL] * mtp_layers]
    if not hybrid_manager:
        kinds = [FULL if k == SLIDING else k for k in kinds]
    return tuple(kinds)


def stage_group_layers(kinds: Sequence[str], group_size: int,
                       stages: Sequence[Stage]) -> tuple[int, ...]:
    """Per stage: the most real layers one KV-cache group has there (its block's cost in
    pages). ``kinds``: every KV-cache layer's kind (kv_kinds); the draft layers sit after
    the decoder layers and belong to the last stage."""
    num_decoder = stages[-1].end
    buckets: dict[str, list[int]] = {}
    for index, kind in enumerate(kinds):
        buckets.setdefault(kind, []).append(index)

    def stage_of(index: int) -> int:
        if index >= num_decoder:
            return len(stages) - 1
        return next(s.rank for s in stages if s.start <= index < s.end)

    most = [0] * len(stages)
    for members in buckets.values():
        parts = -(-len(members) // group_size)
        for i in range(parts):
            counts = [0] * len(stages)
            for index in members[i::parts]:
                counts[stage_of(index)] += 1
            most = [max(a, b) for a, b in zip(most, counts, strict=True)]
    return tuple(most)


def kinds_summary(kinds: Mapping[str, int]) -> dict[str, int]:
    names = {FULL: "attention", SLIDING: "sliding", LINEAR: "linear"}
    return {names[k]: n for k, n in kinds.items()}


__all__ = ["MAX_PIPELINE", "Stage", "embedding_on_every_stage", "kv_kinds", "layer_kinds",
           "partitions", "pp_indices", "split", "stage_group_layers", "stage_weights"]
