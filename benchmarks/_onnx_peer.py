"""The CPU peer: bge-m3 on ONNX Runtime, int8 by dynamic quantization.

The way ONNX ports of bge-m3 run it (aapot/bge-m3-onnx's graph, bge-m3-lite's
encode loop): one graph holds the encoder and the three heads and gives the
dense vector (CLS, normalised), one weight per token (relu of the sparse head)
and the ColBERT vectors (normalised); the texts are sorted by length, padded
per batch, run, and the lexical weights kept as FlagEmbedding does (the
largest weight of each token id, special tokens dropped). int8: onnxruntime's
``quantize_dynamic`` (weights int8 per tensor, activations quantized at run
time) of that graph, every MatMul included.

A benchmark dependency only (``pip install onnxruntime onnx``): the package
never imports this.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

OPSET = 17


def export(model: Path, out_dir: Path, int8: bool) -> Path:
    """``model`` (a bge-m3 folder) as an ONNX graph in ``out_dir``; int8 when asked.
    Made once: an existing file is reused."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fp32 = out_dir / "model.onnx"
    if not fp32.exists():
        _export_fp32(model, fp32)
    if not int8:
        return fp32
    quantized = out_dir / "model-int8.onnx"
    if not quantized.exists():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(fp32), str(quantized), weight_type=QuantType.QInt8)
    return quantized


def _export_fp32(model: Path, path: Path) -> None:
    import torch
    from transformers import AutoModel

    encoder = AutoModel.from_pretrained(model, dtype=torch.float32).eval()
    hidden = encoder.config.hidden_size
    sparse = torch.nn.Linear(hidden, 1)
    sparse.load_state_dict(torch.load(model / "sparse_linear.pt", map_location="cpu"))
    colbert = torch.nn.Linear(hidden, hidden)
    colbert.load_state_dict(torch.load(model / "colbert_linear.pt", map_location="cpu"))

    class M3(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.sparse, self.colbert = encoder, sparse, colbert

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            dense = torch.nn.functional.normalize(h[:, 0], dim=-1)
            weights = torch.relu(self.sparse(h)).squeeze(-1)
            vecs = self.colbert(h[:, 1:]) * attention_mask[:, 1:, None].to(h.dtype)
            return dense, weights, torch.nn.functional.normalize(vecs, dim=-1)

    ids = torch.tensor([[0, 10, 11, 2], [0, 12, 2, 1]])
    mask = (ids != 1).long()
    axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"}}
    with torch.no_grad():
        torch.onnx.export(
            M3(),
            (ids, mask),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=["dense_vecs", "sparse_vecs", "colbert_vecs"],
            dynamic_axes={
                **axes,
                "dense_vecs": {0: "batch"},
                "sparse_vecs": {0: "batch", 1: "tokens"},
                "colbert_vecs": {0: "batch", 1: "tokens1"},
            },
            opset_version=OPSET,
            dynamo=False,
        )


class OnnxM3:
    """FlagEmbedding's ``encode`` over an ONNX graph of :func:`export`."""

    def __init__(self, model: Path, graph: Path, threads: int) -> None:
        import onnxruntime as ort
        from transformers import AutoTokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.unused = {
            self.tokenizer.convert_tokens_to_ids(self.tokenizer.special_tokens_map[name])
            for name in ("cls_token", "eos_token", "pad_token", "unk_token")
        }

    def encode(
        self, texts: list[str], batch_size: int = 32, max_length: int = 1024, colbert: bool = False
    ) -> dict[str, Any]:
        ids = self.tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
        order = np.argsort([-len(x) for x in ids], kind="stable")
        dense: list[Any] = [None] * len(texts)
        lexical: list[Any] = [None] * len(texts)
        vectors: list[Any] = [None] * len(texts)
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(texts), batch_size):
            batch = order[start : start + batch_size]
            width = len(ids[batch[0]])
            input_ids = np.full((len(batch), width), pad, dtype=np.int64)
            for row, i in enumerate(batch):
                input_ids[row, : len(ids[i])] = ids[i]
            mask = np.arange(width)[None, :] < np.array([len(ids[i]) for i in batch])[:, None]
            d, w, c = self.session.run(
                None, {"input_ids": input_ids, "attention_mask": mask.astype(np.int64)}
            )
            for row, i in enumerate(batch):
                n = len(ids[i])
                dense[i] = d[row]
                result: dict[str, float] = {}
                for weight, token in zip(w[row, :n].tolist(), ids[i]):
                    if token not in self.unused and weight > 0:
                        key = str(token)
                        if weight > result.get(key, 0.0):
                            result[key] = weight
                lexical[i] = result
                if colbert:
                    vectors[i] = c[row, : n - 1]
        return {
            "dense_vecs": np.stack(dense),
            "lexical_weights": lexical,
            "colbert_vecs": vectors if colbert else None,
        }
