#!/usr/bin/env bash
# Sets up .venv (scripts/setup.sh) and runs the main job: SpyRL training on the
# CPU default (SmolLM2-135M-Instruct, bundled fact-sheet summarisation game), its
# detectors learning the vote (configs/spy_summ.py:cpu,detectors). Output goes to
# runs/spy_summ_cpu (resumed if it exists). Extra arguments go to the trainer,
# e.g. `bash scripts/train.sh --config.steps=30`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export JAX_PLATFORMS=cpu HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m rlsvr.train --config=configs/spy_summ.py:cpu,detectors --workdir=runs/spy_summ_cpu "$@"
