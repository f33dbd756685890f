"""Build a tiny random-weight model directory that the real vLLM can serve (CPU, no internet).

    python tests/contract/tiny_model.py DIR

(the tests get it from the session fixture ``tiny_model`` in tests/conftest.py, built once per pytest run
in that run's temporary directory).

What it writes (in a few seconds):

* ``tokenizer.json``: a byte-level BPE (vocab ~2048) trained locally with ``tokenizers`` on the
  built-in text below, plus the GLM-4.5/4.7 turn and markup tokens (``<|user|>``, ``<think>``,
  ``<tool_call>``, ``<arg_key>`` ...) that vLLM's ``glm45`` reasoning and ``glm47`` tool parsers
  look up by id;
* ``tokenizer_config.json`` with a GLM-style ``chat_template`` that renders system, user,
  assistant (reasoning and tool calls), tool messages and a ``tools`` list, and ends the
  generation prompt with ``<|assistant|>\\n<think>`` (so all output counts as reasoning until
  ``</think>``);
* ``config.json`` (2-layer ``LlamaForCausalLM``, hidden 128) and ``model.safetensors`` with
  random bf16 weights, written without numpy or torch.

Only the tokenizer step needs ``tokenizers`` (present in ``.venv-vllm``, not in the test venv):
callers without it run this file with the vLLM venv's python (see ``real_vllm.py``).
Idempotent and safe to call from several processes at once: the build holds an exclusive lock
(``DIR.lock``), writes into a temporary sibling directory and renames it into place, so a reader sees
either no model or a complete one; a directory that already holds a complete model (``.complete``
marker) is left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import shutil
import struct
import sys
import tempfile
from array import array
from pathlib import Path

VOCAB_TARGET = 2048
HIDDEN = 128
INTERMEDIATE = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
MAX_POSITIONS = 4096
SEED = 1234

FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
MARKER = ".complete"

EOS = "<|endoftext|>"
# Special tokens (stripped from decoded text); GLM's turn markers are special there too.
SPECIAL_TOKENS = [EOS, "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"]
# Added but not special, as in GLM-4.5/4.7: they must survive detokenisation for the parsers.
MARKUP_TOKENS = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<tool_response>",
    "</tool_response>",
]

CHAT_TEMPLATE = (
    "[gMASK]<sop>"
    "{%- if tools -%}"
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools>\n\n"
    "For each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}</arg_value>...</tool_call>"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- set content = m.content if m.content is string else "
    "(m.content | map(attribute='text') | select('string') | join('') if m.content else '') -%}"
    "{%- if m.role == 'system' -%}<|system|>\n{{ content }}"
    "{%- elif m.role == 'user' -%}<|user|>\n{{ content }}"
    "{%- elif m.role == 'assistant' -%}"
    "{%- set reasoning = m.reasoning_content or m.reasoning -%}"
    "<|assistant|>{{ '\\n' }}"
    "{%- if reasoning -%}<think>{{ reasoning }}</think>{%- else -%}</think>{%- endif -%}"
    "{{ content }}"
    "{%- for tc in m.tool_calls or [] -%}"
    "{%- set f = tc.function if tc.function is defined else tc -%}"
    "<tool_call>{{ f.name }}"
    "{%- if f.arguments is mapping -%}"
    "{%- for k, v in f.arguments.items() -%}"
    "<arg_key>{{ k }}</arg_key><arg_value>{{ v if v is string else v | tojson }}</arg_value>"
    "{%- endfor -%}"
    "{%- elif f.arguments -%}{{ f.arguments }}"
    "{%- endif -%}"
    "</tool_call>"
    "{%- endfor -%}"
    "{%- elif m.role == 'tool' -%}<|observation|><tool_response>{{ content }}</tool_response>"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>\n<think>{%- endif -%}"
)

TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. A server answers requests over HTTP.
You are a helpful assistant. What is the weather like in Berlin today? It is sunny and warm.
Please call the get_weather function with the city and the unit. The temperature is 21 degrees celsius.
Ansible deploys vLLM on eight GPUs with tensor parallelism; the health check returns status 200.
The model thinks first, then it answers: reasoning, content, tool calls, arguments and results.
{"city": "Berlin", "unit": "celsius", "days": 3, "ok": true, "items": [1, 2, 3], "name": null}
def main(argv):\n    return 0\nif __name__ == "__main__":\n    main(sys.argv)
Hello! How can I help you today? Thank you very much. Goodbye and have a nice day.
0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 2025 3.14 -1 +1 = < > / ( ) [ ] { } : ; , . ! ? ' "
abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ
"""


def is_complete(path: str | os.PathLike[str]) -> bool:
    path = Path(path)
    return (path / MARKER).is_file() and all((path / name).is_file() for name in FILES)


def _train_tokenizer():
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET - len(SPECIAL_TOKENS) - len(MARKUP_TOKENS),
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    # Repeat with variations so that the merges cover words, numbers and JSON punctuation.
    corpus = [line for _ in range(20) for line in TRAINING_TEXT.splitlines()]
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    return tok


def _bf16_bytes(rng: random.Random, count: int, std: float) -> bytes:
    """``count`` normal(0, std) values as little-endian bfloat16 (the upper halves of float32)."""
    f32 = array("f", (rng.gauss(0.0, std) for _ in range(count)))
    if sys.byteorder != "little":
        f32.byteswap()
    raw = f32.tobytes()
    out = bytearray(2 * count)
    out[0::2] = raw[2::4]
    out[1::2] = raw[3::4]
    return bytes(out)


def _ones_bf16(count: int) -> bytes:
    return struct.pack("<H", 0x3F80) * count  # 1.0 in bfloat16


def _write_safetensors(path: Path, vocab: int) -> None:
    rng = random.Random(SEED)
    head_dim = HIDDEN // HEADS
    shapes: list[tuple[str, list[int], str]] = [("model.embed_tokens.weight", [vocab, HIDDEN], "rand")]
    for i in range(LAYERS):
        p = f"model.layers.{i}"
        shapes += [
            (f"{p}.input_layernorm.weight", [HIDDEN], "ones"),
            (f"{p}.self_attn.q_proj.weight", [HEADS * head_dim, HIDDEN], "rand"),
            (f"{p}.self_attn.k_proj.weight", [KV_HEADS * head_dim, HIDDEN], "rand"),
            (f"{p}.self_attn.v_proj.weight", [KV_HEADS * head_dim, HIDDEN], "rand"),
            (f"{p}.self_attn.o_proj.weight", [HIDDEN, HEADS * head_dim], "rand"),
            (f"{p}.post_attention_layernorm.weight", [HIDDEN], "ones"),
            (f"{p}.mlp.gate_proj.weight", [INTERMEDIATE, HIDDEN], "rand"),
            (f"{p}.mlp.up_proj.weight", [INTERMEDIATE, HIDDEN], "rand"),
            (f"{p}.mlp.down_proj.weight", [HIDDEN, INTERMEDIATE], "rand"),
        ]
    shapes += [("model.norm.weight", [HIDDEN], "ones"), ("lm_head.weight", [vocab, HIDDEN], "rand")]

    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name, shape, kind in shapes:
        count = 1
        for dim in shape:
            count *= dim
        blob = _ones_bf16(count) if kind == "ones" else _bf16_bytes(rng, count, 0.05)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(head)))
        fh.write(head)
        for blob in blobs:
            fh.write(blob)


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock beside ``path`` (``path.lock``), held for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def build(path: str | os.PathLike[str], force: bool = False) -> Path:
    """Write the tiny model into ``path`` (skipped when it is already complete); returns the path."""
    path = Path(path)
    if not force and is_complete(path):
        return path
    with _locked(path):
        if not force and is_complete(path):  # another process built it while this one waited
            return path
        _build_into(path)
    return path


def _build_into(path: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-model-", dir=path.parent))
    try:
        tok = _train_tokenizer()
        tok.save(str(tmp / "tokenizer.json"))
        n_tokens = tok.get_vocab_size(with_added_tokens=True)
        # Exactly len(tokenizer): a padded vocab would let the random model sample ids with no text.
        vocab = n_tokens
        eos_id = tok.token_to_id(EOS)

        added_decoder = {
            str(tok.token_to_id(t)): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": t in SPECIAL_TOKENS,
            }
            for t in SPECIAL_TOKENS + MARKUP_TOKENS
        }
        tokenizer_config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": MAX_POSITIONS,
            "eos_token": EOS,
            "pad_token": EOS,
            "bos_token": None,
            "unk_token": None,
            "clean_up_tokenization_spaces": False,
            "added_tokens_decoder": added_decoder,
            "additional_special_tokens": SPECIAL_TOKENS[1:],
            "chat_template": CHAT_TEMPLATE,
        }
        (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
        (tmp / "special_tokens_map.json").write_text(
            json.dumps({"eos_token": EOS, "pad_token": EOS, "additional_special_tokens": SPECIAL_TOKENS[1:]}, indent=2)
            + "\n"
        )
        config = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": HIDDEN,
            "intermediate_size": INTERMEDIATE,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS,
            "head_dim": HIDDEN // HEADS,
            "hidden_act": "silu",
            "max_position_embeddings": MAX_POSITIONS,
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "vocab_size": vocab,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": eos_id,
            "eos_token_id": eos_id,
            "pad_token_id": eos_id,
            "torch_dtype": "bfloat16",
            "initializer_range": 0.02,
        }
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (tmp / "generation_config.json").write_text(
            json.dumps({"bos_token_id": eos_id, "eos_token_id": eos_id, "pad_token_id": eos_id}, indent=2) + "\n"
        )
        _write_safetensors(tmp / "model.safetensors", vocab)
        (tmp / MARKER).write_text("ok\n")
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--force"):
        sys.exit(f"usage: {sys.argv[0]} DIR [--force]")
    print(build(sys.argv[1], force=len(sys.argv) == 3))
