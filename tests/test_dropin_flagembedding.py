"""integrations.flagembedding.BGEM3FlagModel against FlagEmbedding's own, on
the same model: code written for FlagEmbedding runs with its import changed,
in this process and against a server, and each answer is FlagEmbedding's
whole (types, dtypes, shapes, key types, and values within the parity
tolerance); every argument it cannot honour is refused by name."""

from __future__ import annotations

import itertools
import json
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bge_m3_sparse_plugin._config import BASE_URL_ENV
from bge_m3_sparse_plugin._exceptions import UnsupportedArgument
from bge_m3_sparse_plugin._precision import CPU_BF16_FLAGS
from bge_m3_sparse_plugin.integrations.flagembedding import BGEM3FlagModel, engine_dtype

from .support.parity import assert_same_result
from .support.server import clean_environ

USAGE = Path(__file__).parent / "support" / "usage" / "flagembedding_usage.py"
FLAG_IMPORT = "from FlagEmbedding import BGEM3FlagModel"
OUR_IMPORT = "from bge_m3_sparse_plugin.integrations.flagembedding import BGEM3FlagModel"

TEXTS = [
    "What is BGE M3?",
    "BM25 is a bag-of-words retrieval function",
    "I love China",
    "",
    "the the the river river bank",
    "A much longer text about rivers, banks and the money kept in them. " * 40,
]


def _changed_usage(tmp_path: Path) -> Path:
    text = USAGE.read_text()
    assert text.count(FLAG_IMPORT) == 1
    changed = tmp_path / "usage_changed.py"
    changed.write_text(text.replace(FLAG_IMPORT, OUR_IMPORT))
    return changed


def _run_usage(path: Path, model_dir: Path, monkeypatch) -> dict:
    monkeypatch.setattr(sys, "argv", [str(path), str(model_dir)])
    return runpy.run_path(str(path), run_name="__main__")["RESULT"]


@pytest.mark.parametrize("where", ["in-process", "server"])
def test_flagembeddings_usage_runs_with_only_the_import_changed(
    where, dropin, server, model_dir, tmp_path, monkeypatch
):
    want = _run_usage(USAGE, model_dir, monkeypatch)
    if where == "server":
        monkeypatch.setenv(BASE_URL_ENV, server.url)
    got = _run_usage(_changed_usage(tmp_path), model_dir, monkeypatch)
    assert_same_result(got, want)


def test_an_engine_left_to_the_exit_stops_there_without_noise(model_dir, tmp_path):
    script = tmp_path / "left_open.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, psutil
            {OUR_IMPORT}

            if __name__ == "__main__":
                model = BGEM3FlagModel({str(model_dir)!r}, use_fp16=False)
                out = model.encode(["left open"], return_sparse=True)
                children = [
                    p.pid for p in psutil.Process().children(recursive=True)
                    if p.name().startswith("VLLM::")
                ]
                report = {{"children": children, "weights": len(out["lexical_weights"][0])}}
                print("REPORT", json.dumps(report))
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=400,
        env=clean_environ(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    report = json.loads(line.removeprefix("REPORT "))
    assert report["weights"] > 0 and report["children"]
    assert [pid for pid in report["children"] if psutil.pid_exists(pid)] == []
    said = done.stdout + done.stderr  # vLLM logs to stdout
    for noise in (
        "Traceback",
        "Exception ignored",
        "leaked shared_memory",
        "died unexpectedly",
        "force killing",
    ):
        assert noise not in said, said[-3000:]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    texts=st.lists(st.sampled_from(TEXTS), min_size=1, max_size=5),
    single=st.booleans(),
    method=st.sampled_from(["encode", "encode_queries", "encode_corpus"]),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    max_length=st.none() | st.integers(2, 1024),
    batch_size=st.none() | st.integers(1, 8),
    truncate_dim=st.none() | st.integers(1, 160),
    instruction=st.none() | st.sampled_from(["Represent this for search: ", "Query:"]),
    fmt=st.sampled_from(["{}{}", "{}\\n{}"]),
)
def test_encode_is_flagembeddings_for_any_arguments(
    dropin,
    flag_model,
    texts,
    single,
    method,
    flags,
    max_length,
    batch_size,
    truncate_dim,
    instruction,
    fmt,
):
    dense, sparse, colbert = flags
    assume(any(flags))  # FlagEmbedding refuses none (the next test)
    sentences = texts[0] if single else texts
    kwargs = {
        "max_length": max_length,
        "batch_size": batch_size,
        "return_dense": dense,
        "return_sparse": sparse,
        "return_colbert_vecs": colbert,
    }
    results = []
    for model in (flag_model, dropin):
        model.truncate_dim = truncate_dim
        model.query_instruction_for_retrieval = instruction
        model.query_instruction_format = fmt
        try:
            results.append(getattr(model, method)(sentences, **kwargs))
        finally:
            model.truncate_dim = None
            model.query_instruction_for_retrieval = None
            model.query_instruction_format = "{}{}"
    got, want = results[1], results[0]
    assert_same_result(got, want)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    pairs=st.lists(
        st.tuples(st.sampled_from(TEXTS[:5]), st.sampled_from(TEXTS)), min_size=1, max_size=5
    ),
    single=st.booleans(),
    weights=st.none() | st.tuples(*[st.floats(0.05, 3)] * 3).map(list),
    max_query_length=st.none() | st.integers(2, 64),
    max_passage_length=st.none() | st.integers(2, 1024),
    batch_size=st.none() | st.integers(1, 4),
)
def test_compute_score_is_flagembeddings_for_any_arguments(
    dropin, flag_model, pairs, single, weights, max_query_length, max_passage_length, batch_size
):
    sentence_pairs = pairs[0] if single else pairs
    kwargs = {
        "batch_size": batch_size,
        "max_query_length": max_query_length,
        "max_passage_length": max_passage_length,
        "weights_for_different_modes": weights,
    }
    assert_same_result(
        dropin.compute_score(sentence_pairs, **kwargs),
        flag_model.compute_score(sentence_pairs, **kwargs),
    )


def test_devices_beside_a_server_are_said_to_be_the_servers(server, model_dir, caplog):
    with BGEM3FlagModel(str(model_dir), base_url=server.url, devices="cpu") as model:
        assert model.encode(["x"])["dense_vecs"].shape == (1, model.hidden_size)
    assert "devices='cpu' is not used: base_url= sends the work to a server" in caplog.text


def test_asking_for_no_output_is_refused_as_flagembedding_refuses_it(dropin, flag_model):
    none = {"return_dense": False, "return_sparse": False, "return_colbert_vecs": False}
    with pytest.raises(AssertionError, match="Must choose one or more"):
        flag_model.encode(["x"], **none)
    with pytest.raises(ValueError, match="Must choose one or more"):
        dropin.encode(["x"], **none)


def test_two_drop_ins_of_one_model_share_one_engine(dropin, model_dir):
    other = BGEM3FlagModel(str(model_dir), use_fp16=False)
    assert other._backend._held is dropin._backend._held
    other.close()
    assert dropin.encode(["still served"])["dense_vecs"].shape[0] == 1


CONSTRUCTOR_REFUSALS = [
    ({"normalize_embeddings": False}, "normalize_embeddings"),
    ({"pooling_method": "mean"}, "pooling_method"),
    ({"colbert_dim": 64}, "colbert_dim"),
    ({"batch_size": 0}, "batch_size"),
    ({"query_max_length": -1}, "query_max_length"),
    ({"passage_max_length": 1.5}, "passage_max_length"),
    ({"truncate_dim": 0}, "truncate_dim"),
    ({"devices": ["cpu", "cpu"]}, "devices"),
    ({"devices": "cuda:0"}, "devices"),  # no GPU here
    ({"devices": 1}, "devices"),
    ({"convert_to_numpy": False}, "convert_to_numpy"),
    ({"dtype": "float16"}, "dtype"),
    ({"hf_overrides": {}}, "hf_overrides"),
    ({"model": "x"}, "model"),
    ({"not_an_argument": 1}, "not_an_argument"),
    ({"base_url": "http://127.0.0.1:9", "enforce_eager": True}, "enforce_eager"),
]


@pytest.mark.parametrize(("kwargs", "name"), CONSTRUCTOR_REFUSALS)
def test_an_argument_without_an_equivalent_is_refused_by_name(model_dir, kwargs, name):
    with pytest.raises(UnsupportedArgument) as caught:
        BGEM3FlagModel(str(model_dir), **kwargs)
    assert caught.value.argument == name
    assert str(caught.value).startswith(f"{name}: ")


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda m: m.encode(["x"], padding="max_length"), "padding"),
        (lambda m: m.encode(["x"], convert_to_numpy=False), "convert_to_numpy"),
        (lambda m: m.encode_queries(["x"], return_tensors="pt"), "return_tensors"),
        (lambda m: m.compute_score([("a", "b")], padding=True), "padding"),
    ],
)
def test_a_method_argument_without_an_equivalent_is_refused_by_name(dropin, call, name):
    with pytest.raises(UnsupportedArgument) as caught:
        call(dropin)
    assert caught.value.argument == name


@given(
    use_fp16=st.booleans(),
    use_bf16=st.booleans(),
    gpu=st.booleans(),
    flags=st.sets(st.sampled_from([*CPU_BF16_FLAGS, "avx2", "avx512f"])),
)
def test_the_engines_precision_is_what_flagembeddings_flags_ask(use_fp16, use_bf16, gpu, flags):
    dtype = engine_dtype(use_fp16, use_bf16, gpu, frozenset(flags))
    if use_bf16:  # FlagEmbedding: bfloat16 first
        assert dtype == "bfloat16"
    elif not use_fp16:  # FlagEmbedding's float32
        assert dtype == "float32"
    elif gpu:  # vLLM's own choice there: float16, as model.half()
        assert dtype == "auto"
    else:  # FlagEmbedding runs float32 on a CPU; the package's rule picks
        assert dtype == ("bfloat16" if set(flags) & set(CPU_BF16_FLAGS) else "float32")


@given(
    costs=st.lists(st.integers(0, 50), max_size=40),
    max_items=st.integers(1, 8),
    max_cost=st.integers(1, 120),
)
def test_requests_hold_at_most_their_inputs_and_colbert_values(costs, max_items, max_cost):
    """The drop-in's requests (_m3_results.chunks): every input once, in
    order; at most max_items each; within max_cost, but for an input over it
    alone, which goes by itself (the server then names its limit)."""
    from bge_m3_sparse_plugin.integrations._m3_results import chunks

    runs = chunks(costs, max_items, max_cost)
    assert [i for run in runs for i in range(len(costs))[run]] == list(range(len(costs)))
    for run in runs:
        part = costs[run]
        assert 1 <= len(part) <= max_items
        assert sum(part) <= max_cost or len(part) == 1
    for first, second in itertools.pairwise(runs):  # each run as long as the bounds allow
        grown = costs[first.start : second.start + 1]
        assert len(grown) > max_items or sum(grown) > max_cost
