#!/usr/bin/env bash
# Build .venv-sglang-VERSION: upstream SGLang (no deps) with the light dependencies its pool classes import,
# plus what the kvlife harness needs, every version pinned by upstream/constraints-VERSION.txt.
# Usage: upstream/setup.sh VERSION   (VERSION is 0.5.23 or 0.5.18). Quick when nothing changed (stamp file).
set -euo pipefail

VERSION="${1:-}"
case "$VERSION" in
  0.5.23 | 0.5.18) ;;
  *) echo "setup.sh: sglang version must be 0.5.23 or 0.5.18, got '${VERSION}'" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-python3}"
VENV="$ROOT/.venv-sglang-$VERSION"
CONSTRAINTS="$ROOT/upstream/constraints-$VERSION.txt"
STAMP="$VENV/.kvlife-sglang-installed"
PIP=("$VENV/bin/pip" install --quiet --disable-pip-version-check -c "$CONSTRAINTS")

# What sglang's pool classes, ScheduleBatch, release_kv_cache and server args import at module level; the
# rest of its declared dependencies (CUDA kernels, serving, multimodal) is never imported on these paths.
LIGHT_DEPS=(orjson psutil pybase64 requests pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp
  transformers dill apache-tvm-ffi sentencepiece compressed-tensors gguf openai partial_json_parser triton numpy)
if [ "$VERSION" = 0.5.18 ]; then
  LIGHT_DEPS+=(xgrammar)  # 0.5.18's function-call detectors import it on the way to schedule_batch
fi
HARNESS_DEPS=(hypothesis z3-solver numpy pytest)

fingerprint() { cat "$0" "$CONSTRAINTS" | sha256sum | cut -d' ' -f1; }

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(fingerprint)" ]; then
  echo "setup: $VENV is up to date"
  exit 0
fi

step() {  # step LABEL CMD...: run CMD and report how long it took
  local label="$1" start=$SECONDS
  shift
  "$@"
  echo "setup: $label took $((SECONDS - start)) s"
}

test -x "$VENV/bin/python" || step "venv" "$PY" -m venv "$VENV"
# torch first and alone, so that nothing later can swap the local CPU wheel for a CUDA build.
step "torch" "${PIP[@]}" torch==2.13.0
step "sglang $VERSION (no deps)" "${PIP[@]}" --no-deps "sglang==$VERSION"
step "light dependencies" "${PIP[@]}" "${LIGHT_DEPS[@]}"
step "harness dependencies" "${PIP[@]}" "${HARNESS_DEPS[@]}"
# Versions from metadata: importing sglang itself needs the adapter's torchvision stub (impl/upstream/compat.py).
"$VENV/bin/python" - "$VERSION" <<'EOF_CHECK'
import sys
from importlib.metadata import version

assert version("sglang") == sys.argv[1], f"sglang {version('sglang')} installed, {sys.argv[1]} asked for"
assert version("torch").startswith("2.13.0+cpu"), f"torch {version('torch')} is not the CPU wheel"
EOF_CHECK
fingerprint > "$STAMP"
echo "setup: $VENV ready ($(du -sh "$VENV" | cut -f1))"
