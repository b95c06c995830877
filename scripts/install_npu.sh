#!/usr/bin/env bash
# Install the recipe into a vllm-ascend container image without replacing the image's torch, torch-npu, vllm or
# vllm-ascend (retool/npu_install.py): pins what the image has, installs requirements.txt and the patched verl under
# those pins, and stops with a message if anything would change them. Run inside the container:
#   bash scripts/install_npu.sh              # requirements.txt, then verl 0.9.1 with patches/
#   bash scripts/install_npu.sh --dry-run    # resolve only: what pip would install
#   PYTHON=/usr/local/python3.12/bin/python3 bash scripts/install_npu.sh   # another interpreter than python3
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="$(command -v "${PYTHON:-python3}")" || { echo "error: ${PYTHON:-python3} not found (set PYTHON)" >&2; exit 1; }
[[ "$PYTHON" == /* ]] || PYTHON="$PWD/$PYTHON"
cd "$REPO_DIR"  # python -m finds retool/ here before the recipe is installed
exec "$PYTHON" -m retool.npu_install --python "$PYTHON" "$@"
