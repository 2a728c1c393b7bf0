#!/usr/bin/env bash
# Build a venv of upstream SGLang (no deps) with the light dependencies its pool classes import, plus what the
# kvlife harness needs, every package pinned.
#
#   upstream/setup.sh VERSION           .venv-sglang-VERSION for a release of upstream/releases.txt, pinned by
#                                       upstream/constraints-VERSION.txt
#   upstream/setup.sh --freeze VERSION  the same venv with only torch and the release's own `==` pins fixed;
#                                       checked, then frozen (pip freeze) into upstream/constraints-VERSION.txt
#   upstream/setup.sh --src DIR [NAME]  .venv-sglang-src-NAME (NAME: DIR's base name) from a source checkout,
#                                       `pip install --no-deps -e DIR/python`, pinned by the constraints of the
#                                       closest release at or before the checkout's version
#
# SGLANG_VENV_DIR puts the venvs in another folder (default: the repository root). Quick when nothing changed
# (stamp file); exit 2 with one line on bad usage.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PY:-python3}"
VENV_DIR="${SGLANG_VENV_DIR:-$ROOT}"
RELEASES=("$PY" "$ROOT/impl/upstream/releases.py")

usage() { echo "setup.sh: $1" >&2; exit 2; }

MODE=release
case "${1:-}" in
  --freeze) MODE=freeze; shift ;;
  --src) MODE=src; shift ;;
esac

if [ "$MODE" = src ]; then
  SRC="${1:-}"
  [ -n "$SRC" ] && [ -f "$SRC/python/pyproject.toml" ] \
    || usage "--src needs an sglang checkout (DIR/python/pyproject.toml), got '${SRC}'"
  SRC="$(cd "$SRC" && pwd)"
  NAME="${2:-$(basename "$SRC")}"
  [[ "$NAME" =~ ^[A-Za-z0-9._-]+$ ]] || usage "venv name must be letters, digits, '.', '_' or '-', got '${NAME}'"
  VERSION=""
  VENV="$VENV_DIR/.venv-sglang-src-$NAME"
else
  VERSION="${1:-}"
  mapfile -t KNOWN < <("${RELEASES[@]}" list)
  [[ " ${KNOWN[*]} " == *" ${VERSION} "* && -n "$VERSION" ]] \
    || usage "sglang version must be one of ${KNOWN[*]} (upstream/releases.txt), got '${VERSION}'"
  VENV="$VENV_DIR/.venv-sglang-$VERSION"
  EXTRAS="$("${RELEASES[@]}" extras "$VERSION")"
  CONSTRAINTS="$ROOT/upstream/constraints-$VERSION.txt"
  [ "$MODE" = freeze ] || [ -f "$CONSTRAINTS" ] \
    || usage "no upstream/constraints-$VERSION.txt; make it with upstream/setup.sh --freeze $VERSION"
fi
STAMP="$VENV/.kvlife-sglang-installed"

# What sglang's pool classes, ScheduleBatch, the Scheduler and its result processor, release_kv_cache, server args and the PD decode side
# (disaggregation/decode.py needs einops) import at module level; the rest of its declared dependencies (CUDA
# kernels, serving, multimodal) is never imported on these paths. A release's extras are in releases.txt.
LIGHT_DEPS=(orjson psutil pybase64 requests pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp
  transformers dill apache-tvm-ffi sentencepiece compressed-tensors gguf openai partial_json_parser triton numpy
  einops fastapi uvicorn setproctitle)
HARNESS_DEPS=(hypothesis z3-solver numpy pytest)

fingerprint() {  # what a venv was built from: this script, its pins and extras, or a checkout and every release's
  if [ "$MODE" = src ]; then
    cat "$0" "$ROOT/upstream/releases.txt" "$ROOT"/upstream/constraints-*.txt "$SRC/python/pyproject.toml"
    echo "$SRC"
  else
    cat "$0" "$CONSTRAINTS"
    echo "$EXTRAS"
  fi | sha256sum | cut -d' ' -f1
}

if [ "$MODE" != freeze ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(fingerprint)" ]; then
  echo "setup: $VENV is up to date"
  exit 0
fi

step() {  # step LABEL CMD...: run CMD and report how long it took
  local label="$1" start=$SECONDS
  shift
  "$@"
  echo "setup: $label took $((SECONDS - start)) s"
}

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
PINS="$WORK/constraints.txt"
# torch first and alone, so that nothing later can swap the local CPU wheel for a CUDA build.
echo "torch==2.13.0" > "$PINS"
PIP=("$VENV/bin/pip" install --quiet --disable-pip-version-check -c "$PINS")

test -x "$VENV/bin/python" || step "venv" "$PY" -m venv "$VENV"
[ "$MODE" != release ] || cp "$CONSTRAINTS" "$PINS"
step "torch" "${PIP[@]}" torch==2.13.0
if [ "$MODE" = src ]; then
  step "sglang from $SRC (editable, no deps)" "${PIP[@]}" --no-deps -e "$SRC/python"
  VERSION="$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("sglang"))')"
  CLOSEST="$("${RELEASES[@]}" closest "$VERSION")"
  echo "setup: the checkout is sglang $VERSION; pinned by upstream/constraints-$CLOSEST.txt (the closest release)"
  # The release's own sglang pin would contradict the checkout's version.
  grep -v '^sglang==' "$ROOT/upstream/constraints-$CLOSEST.txt" > "$PINS"
  EXTRAS="$("${RELEASES[@]}" extras "$CLOSEST")"
else
  step "sglang $VERSION (no deps)" "${PIP[@]}" --no-deps "sglang==$VERSION"
fi
if [ "$MODE" = freeze ]; then
  # The release's own exact pins of the light dependencies (transformers, openai, ...), which setup keeps.
  "$VENV/bin/python" "$ROOT/upstream/declared_pins.py" "${LIGHT_DEPS[@]}" $EXTRAS >> "$PINS"
fi
# shellcheck disable=SC2086 # EXTRAS is a word list
step "light dependencies" "${PIP[@]}" "${LIGHT_DEPS[@]}" $EXTRAS
step "harness dependencies" "${PIP[@]}" "${HARNESS_DEPS[@]}"
# The adapter's torchvision stub first, then every module the adapter reaches; a missing dependency fails here.
(cd "$ROOT" && "$VENV/bin/python" upstream/import_check.py "$VERSION")
if [ "$MODE" = freeze ]; then
  {
    echo "# Exact versions for every install into .venv-sglang-$VERSION (pip -c), verified by upstream/setup.sh $VERSION on CPU."
    echo "# torch is the local CPU wheel; an open range would pull a multi-GB CUDA build."
    "$VENV/bin/pip" freeze --disable-pip-version-check | sed 's/^torch==\(.*\)+cpu$/torch==\1/'
  } > "$CONSTRAINTS"
  echo "setup: wrote upstream/constraints-$VERSION.txt ($(grep -vc '^#' "$CONSTRAINTS") packages)"
fi
fingerprint > "$STAMP"
echo "setup: $VENV ready ($(du -sh "$VENV" | cut -f1))"
