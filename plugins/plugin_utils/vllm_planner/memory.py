"""The memory model: what the engine reserves per GPU besides weights and the KV cache.

vLLM sizes its KV pool as ``total x gpu_memory_utilization - weights - peak activation of
the profiling run - non-torch memory``. The profiling run pushes ``max_num_batched_tokens``
tokens through the model (all of ``max_model_len`` when prefills are not chunked) and
samples ``max_num_seqs`` rows of logits over the whole vocabulary, so both flags and the
vocabulary size drive the reserve. Coefficients are upper bounds fitted to real start-ups.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Geometry
from .versions import EngineTraits

GIB = 1 << 30
# Forward-pass activation bytes per token: gate/up projections, their activation and the
# residual/norm buffers (about 4 copies of each width; 111 KB/token measured for Llama-3-8B
# on a 0.6.4 engine, 147 KB/token by this formula).
FFN_COPIES = 4
HIDDEN_COPIES = 4
# Floor for tiny models: allocator blocks, workspace buffers, attention metadata.
MIN_ACTIVATION = GIB // 2
# CUDA graph capture outside the budget: pool per captured batch size, plus a floor.
CUDA_GRAPH_BASE = GIB // 2
CUDA_GRAPH_PER_SEQ = 2 << 20
# Runtime head-room beyond graphs (fragmentation, NCCL growth, sampler spikes).
RUNTIME_MARGIN = GIB


@dataclass(frozen=True)
class Reserve:
    activation_bytes: int
    non_torch_bytes: int

    @property
    def total(self) -> int:
        return self.activation_bytes + self.non_torch_bytes


def profile_tokens(max_num_batched_tokens: int, max_model_len: int, chunked: bool) -> int:
    """Tokens in the profiling forward pass."""
    return max_num_batched_tokens if chunked else max(max_num_batched_tokens, max_model_len)


def activation_bytes(geo: Geometry, engine: EngineTraits, tp: int, tokens: int,
                     max_num_seqs: int, act_bytes: int) -> int:
    """Peak activation of the profiling run on one GPU.

    The forward pass and the sampler run one after the other, so the peak is the larger of
    the two, not their sum (logs: Qwen3-0.6B and Qwen3-32B peak alike at 5.6 GiB on 0.11).
    """
    if geo.is_moe:
        ffn = geo.moe_top_k * geo.moe_intermediate_size + geo.shared_expert_intermediate_size
    else:
        ffn = geo.intermediate_size
    qkv = (geo.num_attention_heads + 2 * geo.num_kv_heads) * geo.head_dim
    per_token = act_bytes * (FFN_COPIES * -(-ffn // tp) + -(-qkv // tp)
                             + HIDDEN_COPIES * geo.hidden_size)
    forward = tokens * per_token
    sampler = max_num_seqs * geo.vocab_size * engine.sampler_bytes
    return max(MIN_ACTIVATION, forward, sampler)


def reserve(geo: Geometry, engine: EngineTraits, tp: int, tokens: int, max_num_seqs: int,
            act_bytes: int) -> Reserve:
    non_torch = engine.non_torch_bytes_tp if tp > 1 else engine.non_torch_bytes_tp1
    return Reserve(activation_bytes(geo, engine, tp, tokens, max_num_seqs, act_bytes), non_torch)


def graph_bytes(max_num_seqs: int, enforce_eager: bool) -> int:
    """The CUDA graphs' memory pool (none with enforce_eager)."""
    return 0 if enforce_eager else CUDA_GRAPH_BASE + CUDA_GRAPH_PER_SEQ * min(max_num_seqs, 512)


def in_budget_graph_bytes(engine: EngineTraits, max_num_seqs: int, enforce_eager: bool) -> int:
    """Graph memory the engine takes from its budget before it sizes the pool (the
    extensible KV cache measures after capture, 0.34+); 0 where graphs come after."""
    return graph_bytes(max_num_seqs, enforce_eager) if engine.cuda_graphs_in_budget else 0


def outside_budget_bytes(engine: EngineTraits, max_num_seqs: int, enforce_eager: bool) -> int:
    """Memory the engine uses beyond its utilization budget at run time."""
    graphs = 0 if engine.cuda_graphs_in_budget else graph_bytes(max_num_seqs, enforce_eager)
    return graphs + RUNTIME_MARGIN
