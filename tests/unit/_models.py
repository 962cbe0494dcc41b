"""Model configs and workloads shared by the planner tests."""

from __future__ import annotations

from typing import Any

# Qwen/Qwen2.5-72B-Instruct's config.json (the real values; the notes' copy is malformed).
QWEN25_72B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 8192,
    "intermediate_size": 29568,
    "max_position_embeddings": 32768,
    "model_type": "qwen2",
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 152064,
}
QWEN25_72B_TOTAL_SIZE = 145_412_407_296

WORKLOAD = {
    "prompt_tokens_p50": 1200,
    "prompt_tokens_p95": 6000,
    "output_tokens_p50": 300,
    "output_tokens_p95": 1200,
    "concurrency": 64,
}

# The notes' config.json as written (the torch_dtype string is never closed): malformed JSON.
NOTES_CONFIG = (
    '{"architectures":["Qwen2ForCausalLM"],"attention_dropout":0.0,"bos_token_id":151643,'
    '"eos_token_id":151645,"head_dim":128,"hidden_act":"silu","hidden_size":8192,'
    '"intermediate_size":29568,"max_position_embeddings":131072,"model_type":"qwen2",'
    '"num_attention_heads":64,"num_hidden_layers":80,"num_key_value_heads":8,'
    '"rms_norm_eps":1e-06,"rope_theta":1000000.0,"torch_dtype":"bfloat16,"vocab_size":152064,'
    '"use_cache":true}'
)
