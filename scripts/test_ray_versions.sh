#!/usr/bin/env bash
# The Ray tests on the oldest Ray that pyproject.toml allows (ray[data]>=2.50):
# Ray 2.50.0's wheel in a folder of its own, put before .venv's Ray 2.60 on
# PYTHONPATH (the workers that `ray start` and ray.init spawn inherit it), on
# .venv's other packages. The main suite has already run them on Ray 2.60.0.
set -euo pipefail
cd "$(dirname "$0")/.."
OLDEST=2.50.0
DIR=.venv-ray-$OLDEST
if [ ! -f "$DIR/.installed" ]; then
  rm -rf "$DIR"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --target "$DIR" "ray==$OLDEST"
  touch "$DIR/.installed"
fi
export PYTHONPATH="$PWD/$DIR${PYTHONPATH:+:$PYTHONPATH}"
found=$(.venv/bin/python -c 'import ray; print(ray.__version__)')
if [ "$found" != "$OLDEST" ]; then
  echo "expected Ray $OLDEST on PYTHONPATH, found $found" >&2
  exit 1
fi
echo "== Ray $found (the oldest allowed): the Ray tests, one node and two" >&2
.venv/bin/python -m pytest -p no:cacheprovider "$@" tests/test_index_ray.py \
  "tests/test_index_ray_cluster.py::test_two_nodes_give_the_single_machine_rows_and_load_postgres"
