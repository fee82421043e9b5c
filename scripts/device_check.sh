#!/bin/bash
# The device check: run it first on a lent GPU machine; its table goes into docs/device.md with the
# card's name. At most BUDGET seconds (default 480) for all sections; writes device_check.md / .json to $OUT.
# Prepare here (once): the wheels the machine's Python lacks, and the rendered glyphs:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d .whl \
#     pytorch-metric-learning==2.9.0 faiss-cpu==1.15.1
#   mkdir -p .cache/dmlkit/glyphs && cp ~/.cache/dmlkit/glyphs/glyphs-v2-32px.npz .cache/dmlkit/glyphs/
# Run (device tool): command "bash scripts/device_check.sh", carry [".whl", ".cache/dmlkit/glyphs"], timeout_s 560.
# On a machine without a GPU:  bash scripts/device_check.sh --cpu   (small sizes; tests/test_device_check.py)
# Extra arguments go to benchmarks/device_check.py (e.g. --testbed CONFIG... --seeds 0 1 --jobs 12).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
if ! $PY -c "import pytorch_metric_learning, faiss" 2>/dev/null && compgen -G ".whl/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export DMLKIT_CACHE=${DMLKIT_CACHE:-$PWD/.cache/dmlkit}
exec timeout -k 10 "$(( ${BUDGET:-480} + 60 ))" $PY -m benchmarks.device_check --out "${OUT:-device_check_out}" \
  --budget "${BUDGET:-480}" "$@"
