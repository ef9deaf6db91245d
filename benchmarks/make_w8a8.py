"""An int8 W8A8 checkpoint of a bge-m3 folder, in compressed-tensors' format, for vLLM.

    python benchmarks/make_w8a8.py SRC OUT

llm-compressor's data-free W8A8 (int8 weights, one scale per output channel;
int8 activations, one dynamic scale per token) of every Linear of the encoder
but XLM-R's unused pooler; the heads (sparse_linear.pt, colbert_linear.pt),
which vLLM loads apart, and the tokenizer are copied as they are. vLLM's CPU
backend runs the result with --dtype bfloat16 (its int8 kernel takes bfloat16
or float16 activations, not float32); benchmarks/bench_precision.py --w8a8
measures it.

llm-compressor 0.14 pins transformers and compressed-tensors to other
releases than vLLM 0.32's, so it runs in a venv of its own:

    python -m venv .venv-llmcompressor
    .venv-llmcompressor/bin/pip install torch==2.13.0 llmcompressor
    .venv-llmcompressor/bin/python benchmarks/make_w8a8.py models/bge-m3-mid models/bge-m3-mid-w8a8
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def main() -> None:
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from transformers import AutoModel, AutoTokenizer

    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    model = AutoModel.from_pretrained(src, dtype="auto")
    recipe = QuantizationModifier(targets="Linear", scheme="W8A8", ignore=["re:.*pooler.*"])
    oneshot(model=model, recipe=recipe)
    model.save_pretrained(out, save_compressed=True)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    for name in ("sparse_linear.pt", "colbert_linear.pt"):
        shutil.copy(src / name, out / name)
    print(out)


if __name__ == "__main__":
    main()
