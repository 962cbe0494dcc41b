#!/usr/bin/env python3
"""Write a tiny Qwen2-architecture model directory the CPU build of vLLM can serve.

    make_tiny_model.py DEST [--config config.json] [--lock NAME.lock.yml]

DEST gets the config (default: a 4-layer Qwen2 with 2 KV heads of 32 dimensions), a
byte-level BPE tokenizer trained here on a built-in text (tokenizer.json, ~1000 tokens)
and a tokenizer_config.json with a ChatML chat template. There are no weights: serve it
with `--load-format dummy` (random weights), which is all a test of the serving path and
of the KV cache needs. Runs with any Python that has the `tokenizers` library (the vLLM
virtual environment has it); test fixtures, no network.

--lock also writes a model lock (the format of playbooks/lock_model.yml) for the files, so
roles/model_artifacts can deploy the directory as a pre-staged model. The model is not on
the Hub, so its "commit" is a content address: the sha1 of the sorted "path sha256" lines.
The output is deterministic: inventories/local/models/tiny-qwen2/ holds it, with its lock.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
DEFAULT_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 1024,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
CORPUS = (
    "The KV cache is a fixed pool of blocks; the scheduler admits sequences while blocks "
    "are free and preempts running ones when the pool runs dry. Chunked prefill splits long "
    "prompts into steps that interleave with decodes, so time to first token stays low. "
    "A replica listens on its own port, holds its own GPUs and restarts on failure. "
    "Quick brown foxes jump over lazy dogs; numbers 0123456789 and punctuation ,.;:!?'\"()[]{}"
)


def train_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE tokenizer with the ChatML special tokens as ids 0, 1, 2."""
    tok = importlib.import_module("tokenizers")
    tokenizer = tok.Tokenizer(tok.models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = tok.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tok.decoders.ByteLevel()
    trainer = tok.trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=tok.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Many distinct made-up words give the trainer enough pairs to reach vocab_size merges.
    words = [f"{a}{b}{c}" for a in "bcdfgklmnprst" for b in "aeiou" for c in "nrstlk"]
    tokenizer.train_from_iterator([CORPUS] * 50 + [" ".join(words)] * 20, trainer=trainer)
    return tokenizer


def write_model(dest: Path, config: dict[str, Any], vocab_size: int = 1000) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    text_config = config.get("text_config", config)
    model_vocab = int(text_config.get("vocab_size", vocab_size))
    tokenizer = train_tokenizer(min(vocab_size, model_vocab))
    if tokenizer.get_vocab_size() > model_vocab:
        raise SystemExit(f"tokenizer has {tokenizer.get_vocab_size()} tokens, the config "
                         f"only {model_vocab}: raise vocab_size in the config")
    tokenizer.save(str(dest / "tokenizer.json"))
    (dest / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": int(text_config.get("max_position_embeddings", 2048)),
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n")


def write_lock(dest: Path, lock: Path, repo_id: str) -> None:
    """A model lock pinning every file of DEST by size and sha256."""
    files = sorted(p for p in dest.iterdir() if p.is_file())
    digests = [(p.name, p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
               for p in files]
    commit = hashlib.sha1("".join(f"{name} {sha}\n" for name, _size, sha in digests).encode(),
                          usedforsecurity=False).hexdigest()
    lines = ["---", "# Model lock of a generated test model (scripts/make_tiny_model.py --lock):",
             "# not on the Hub, so the commit is the sha1 of the sorted 'path sha256' lines.",
             "version: 1", f"repo_id: {repo_id}", f"revision: {json.dumps(commit)}",
             f"commit: {json.dumps(commit)}", "files:"]
    for name, size, sha in digests:
        lines += [f"  - path: {json.dumps(name)}", f"    size: {size}",
                  f"    sha256: {json.dumps(sha)}"]
    lock.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("dest", type=Path)
    parser.add_argument("--config", type=Path, help="config.json to use (default: built in)")
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--lock", type=Path, help="also write a model lock for the files")
    parser.add_argument("--repo-id", default="local/tiny-qwen2", help="the lock's repo_id")
    args = parser.parse_args(argv)
    config = json.loads(args.config.read_text()) if args.config else dict(DEFAULT_CONFIG)
    write_model(args.dest, config, args.vocab_size)
    if args.lock:
        write_lock(args.dest, args.lock, args.repo_id)


if __name__ == "__main__":
    main()
