"""integrations.milvus.BGEM3EmbeddingFunction against pymilvus-model's own
(which wraps FlagEmbedding), on the same model: Milvus's hybrid-search flow
runs with only the import changed, in this process and against a server,
with the same vectors (types, dtypes, shapes, values within the parity
tolerance) and the same hits."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bge_m3_sparse_plugin._config import BASE_URL_ENV
from bge_m3_sparse_plugin.integrations.milvus import sparse_rows

from .support.parity import assert_same_result

USAGE = Path(__file__).parent / "support" / "usage" / "milvus_usage.py"
MILVUS_IMPORT = "from pymilvus.model.hybrid import BGEM3EmbeddingFunction"
OUR_IMPORT = "from bge_m3_sparse_plugin.integrations.milvus import BGEM3EmbeddingFunction"


def _run(path: Path, model_dir: Path, db: Path, monkeypatch) -> dict:
    monkeypatch.setattr(sys, "argv", [str(path), str(model_dir), str(db)])
    return runpy.run_path(str(path), run_name="__main__")["RESULT"]


@pytest.mark.parametrize("where", ["in-process", "server"])
def test_milvus_hybrid_search_runs_with_only_the_import_changed(
    where, dropin, server, model_dir, tmp_path, monkeypatch
):
    want = _run(USAGE, model_dir, tmp_path / "theirs.db", monkeypatch)
    text = USAGE.read_text()
    assert text.count(MILVUS_IMPORT) == 1
    changed = tmp_path / "usage_changed.py"
    changed.write_text(text.replace(MILVUS_IMPORT, OUR_IMPORT))
    if where == "server":
        monkeypatch.setenv(BASE_URL_ENV, server.url)
    got = _run(changed, model_dir, tmp_path / "ours.db", monkeypatch)
    assert_same_result(got, want)
    assert len(got["hits"]) == 2 and all(len(hits) == 5 for hits in got["hits"])


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.dictionaries(st.integers(0, 249).map(str), st.floats(2**-10, 5, width=32), max_size=6),
        max_size=5,
    )
)
def test_sparse_rows_are_pymilvus_models_csr_rows(rows):
    from pymilvus.model.sparse.utils import stack_sparse_embeddings
    from scipy.sparse import csr_array

    got = sparse_rows(rows, 250)
    if not rows:
        assert got.shape == (0, 250)
        return
    # pymilvus-model's own construction, row by row (bge_m3.py's _encode)
    want = stack_sparse_embeddings(
        [
            csr_array(
                (
                    np.array(list(lw.values()), dtype=np.float64),
                    ([0] * len(lw), [int(k) for k in lw]),
                ),
                shape=(1, 250),
            )
            for lw in rows
        ]
    ).tocsr()
    assert_same_result(got, want)
