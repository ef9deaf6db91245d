"""Build a small, deterministic, random model shaped like BAAI/bge-m3.

BAAI/bge-m3 cannot be downloaded everywhere (CI has no model hub), so the
tests, the demo and the benchmarks build this stand-in instead. It has the
same files as the real checkpoint, so vLLM's ``BgeM3EmbeddingModel`` and
FlagEmbedding's ``BGEM3FlagModel`` both load it:

- ``config.json``: XLM-RoBERTa, head_dim 64 (the CPU attention backend
  rejects smaller heads);
- a Unigram tokenizer with XLM-R's special tokens ``<s>``=0, ``<pad>``=1,
  ``</s>``=2, ``<unk>``=3 and ``<mask>`` last;
- ``model.safetensors``, ``sparse_linear.pt`` and ``colbert_linear.pt``.

The sparse head's bias is calibrated on a fixed corpus so that about half
of the tokens get a positive weight: with a random bias every weight can
be negative, and a parity test would then compare empty dicts.

Usage: ``python -m bge_m3_sparse_plugin.tiny_model OUT_DIR [--hidden-size
768 --num-layers 6 --num-heads 12]``. Needs torch and transformers.
"""

from __future__ import annotations

import argparse
import json
import string
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["CALIBRATION_TEXTS", "WORDS", "TinyModelSpec", "build_tiny_model"]

_SPECIAL = ["<s>", "<pad>", "</s>", "<unk>"]
_MASK = "<mask>"


def _load_data() -> dict[str, Any]:
    # The word lists and calibration texts are a package data file, not code.
    text = (
        resources.files("bge_m3_sparse_plugin").joinpath("_data/tiny_model.json").read_text("utf-8")
    )
    data: dict[str, Any] = json.loads(text)
    return data


_DATA = _load_data()
# The whole words of the vocabulary: each is one token of the small model.
WORDS: tuple[str, ...] = tuple(_DATA["words"])
# The sparse head's bias is set so that about half of the tokens these texts
# produce get a positive weight.
CALIBRATION_TEXTS: tuple[str, ...] = tuple(_DATA["calibration_texts"])


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the random model. The defaults build the small test model."""

    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 2
    intermediate_size: int = 256
    max_position_embeddings: int = 1026  # XLM-R offsets positions by pad+1: 1024 tokens
    seed: int = 0
    target_positive_share: float = 0.5
    vocab_size: int | None = None  # pad the embedding table past the tokenizer (bge-m3: 250002)


def _vocab() -> list[tuple[str, float]]:
    """Unigram pieces with scores that prefer whole words over characters."""
    pieces: list[str] = []
    seen: set[str] = set(_SPECIAL) | {_MASK}

    def add(piece: str) -> None:
        if piece not in seen:
            seen.add(piece)
            pieces.append(piece)

    add("▁")
    for word in WORDS:
        add("▁" + word)
        add("▁" + word.capitalize())
    for sub in _DATA["subwords"]:
        add(sub)
    chars = string.ascii_letters + string.digits + string.punctuation + _DATA["characters"]
    for ch in chars:
        add(ch)
        add("▁" + ch)
    vocab = [(tok, 0.0) for tok in _SPECIAL]
    vocab += [(p, -10.0 + 0.5 * len(p)) for p in pieces]
    vocab.append((_MASK, 0.0))
    return vocab


def build_tokenizer() -> Any:
    from transformers import XLMRobertaTokenizer

    return XLMRobertaTokenizer(vocab=_vocab())


def build_tiny_model(out_dir: str | Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """Write the model into ``out_dir`` (created if missing) and return its path.

    The same spec always gives the same files' contents on the same
    torch/transformers versions.
    """
    import torch

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.model_max_length = spec.max_position_embeddings - 2
    tokenizer.save_pretrained(out)
    torch.manual_seed(spec.seed)
    model = _encoder(spec, max(len(tokenizer), spec.vocab_size or 0))
    model.save_pretrained(out, safe_serialization=True)
    _add_bge_m3_keys(out / "config.json")
    sparse_linear, colbert_linear = _heads(model, tokenizer, spec)
    torch.save(sparse_linear.state_dict(), out / "sparse_linear.pt")
    torch.save(colbert_linear.state_dict(), out / "colbert_linear.pt")
    (out / "tiny_model_spec.json").write_text(json.dumps(asdict(spec), indent=2) + "\n")
    return out


# Keys of bge-m3's config.json that transformers 5 no longer writes, with
# bge-m3's values: without position_embedding_type, vLLM's plain XLM-R path
# (no --hf-overrides) fails where it runs bge-m3. tests/test_tiny_model.py
# compares the key sets with a copy of bge-m3's config.json.
BGE_M3_ONLY_KEYS: dict[str, Any] = {
    "_name_or_path": "",
    "output_past": True,
    "position_embedding_type": "absolute",
    "torch_dtype": "float32",
}


def _add_bge_m3_keys(config_path: Path) -> None:
    config = json.loads(config_path.read_text())
    config = dict(sorted({**BGE_M3_ONLY_KEYS, **config}.items()))
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def _encoder(spec: TinyModelSpec, vocab_size: int) -> Any:
    """A random XLM-RoBERTa encoder of ``spec``'s shape."""
    import torch
    from transformers import XLMRobertaConfig, XLMRobertaModel

    config = XLMRobertaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        intermediate_size=spec.intermediate_size,
        max_position_embeddings=spec.max_position_embeddings,
        type_vocab_size=1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        layer_norm_eps=1e-5,
        architectures=["XLMRobertaModel"],
        torch_dtype="float32",  # type: ignore[call-arg]  # a config key, passed through **kwargs
    )
    model = XLMRobertaModel(config, add_pooling_layer=False).eval()
    # Random init leaves biases at 0 and LayerNorms at identity; give the
    # encoder some spread so that tokens in context differ from each other.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "embeddings" in name and param.dim() == 2:
                param.normal_(0.0, 0.5)
    return model


def _heads(model: Any, tokenizer: Any, spec: TinyModelSpec) -> tuple[Any, Any]:
    """FlagEmbedding's sparse and ColBERT heads; the sparse bias calibrated so
    that ``spec.target_positive_share`` of the calibration tokens weigh > 0."""
    import torch

    hidden = spec.hidden_size
    sparse_linear = torch.nn.Linear(hidden, 1)
    colbert_linear = torch.nn.Linear(hidden, hidden)
    with torch.no_grad():
        sparse_linear.weight.normal_(0.0, 1.0 / hidden**0.5)
        sparse_linear.bias.zero_()
        enc = tokenizer(list(CALIBRATION_TEXTS), padding=True, return_tensors="pt")
        states = model(**enc).last_hidden_state
        scores = sparse_linear(states).squeeze(-1)[enc["attention_mask"].bool()]
        threshold = torch.quantile(scores, 1.0 - spec.target_positive_share)
        sparse_linear.bias.fill_(-float(threshold))
    return sparse_linear, colbert_linear


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    defaults = TinyModelSpec()
    parser.add_argument("--hidden-size", type=int, default=defaults.hidden_size)
    parser.add_argument("--num-layers", type=int, default=defaults.num_layers)
    parser.add_argument("--num-heads", type=int, default=defaults.num_heads)
    parser.add_argument("--intermediate-size", type=int, default=None)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    args = parser.parse_args(argv)
    spec = TinyModelSpec(
        hidden_size=args.hidden_size,
        num_layers=args.num_layers,
        num_heads=args.num_heads,
        intermediate_size=args.intermediate_size or 2 * args.hidden_size,
        seed=args.seed,
    )
    out = build_tiny_model(args.out_dir, spec)
    print(out)


if __name__ == "__main__":
    main()
