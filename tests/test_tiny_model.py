"""The built-in small model: deterministic, and calibrated so parity is not vacuous."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from bge_m3_sparse_plugin.tiny_model import CALIBRATION_TEXTS, TinyModelSpec, build_tiny_model

from .support.texts import PARITY_TEXTS


def _digest(path: Path) -> dict[str, str]:
    return {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(path.iterdir())
        if f.name
        in {
            "model.safetensors",
            "sparse_linear.pt",
            "colbert_linear.pt",
            "tokenizer.json",
            "config.json",
        }
    }


def test_same_seed_same_model(model_dir, tmp_path):
    again = build_tiny_model(tmp_path / "again")
    assert _digest(again) == _digest(model_dir)
    assert len(_digest(model_dir)) == 5


def test_xlm_r_special_tokens(tokenizer):
    assert [tokenizer.convert_ids_to_tokens(i) for i in range(4)] == [
        "<s>",
        "<pad>",
        "</s>",
        "<unk>",
    ]
    assert tokenizer.convert_ids_to_tokens(len(tokenizer) - 1) == "<mask>"
    assert tokenizer("a")["input_ids"][0] == 0 and tokenizer("a")["input_ids"][-1] == 2


def _positive_share(model_dir: Path, texts: list[str]) -> float:
    """Share of non-special token positions whose sparse weight is > 0."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    head = torch.nn.Linear(model.config.hidden_size, 1)
    head.load_state_dict(torch.load(model_dir / "sparse_linear.pt"))
    with torch.no_grad():
        enc = tokenizer(texts, padding=True, return_tensors="pt")
        weights = torch.relu(head(model(**enc).last_hidden_state)).squeeze(-1)
    real = enc["input_ids"] > 3  # not <s>, <pad>, </s>, <unk>
    return float((weights[real] > 0).float().mean())


def test_about_half_the_tokens_get_a_positive_weight(model_dir):
    target = TinyModelSpec().target_positive_share
    assert abs(_positive_share(model_dir, CALIBRATION_TEXTS) - target) < 0.05
    # On texts it was not calibrated on, still a good share either way.
    assert 0.25 < _positive_share(model_dir, list(PARITY_TEXTS.values())) < 0.75


def test_the_small_models_config_has_every_key_of_bge_m3s(model_dir):
    """So that it stands in for bge-m3 on every path of vLLM's (its plain
    XLM-R one, without --hf-overrides, reads position_embedding_type); the
    sizes differ, the kinds of values do not. The committed copy under
    benchmarks/ too."""
    bge_m3 = json.loads((Path(__file__).parent / "data" / "bge-m3-config.json").read_text())
    root = Path(__file__).parent.parent
    for folder in (model_dir, root / "benchmarks" / "models" / "bge-m3-small"):
        small = json.loads((Path(folder) / "config.json").read_text())
        assert set(bge_m3) - set(small) == set(), folder
        assert {k: type(small[k]) for k in bge_m3} == {k: type(v) for k, v in bge_m3.items()}
        same = ("position_embedding_type", "model_type", "architectures", "torch_dtype")
        assert {k: small[k] for k in same} == {k: bge_m3[k] for k in same}
