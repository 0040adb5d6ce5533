#!/usr/bin/env bash
# The README's main job: certify the shipped Max-of-4 model and audit the certificate.
# Runs the commands as modules of the Python in $PY (make demo PY=...), not
# whichever check-cert / gen-cert happens to be first on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
model=generator/models/max4_v64_seed0.pt
out=${DEMO_OUT:-/tmp/maxk-demo}
mkdir -p "$out"
echo "== exact-accuracy $model   (float64, all 64^4 sequences; an evaluation, not a proof)"
"$PY" -m generator.ground_truth "$model"
echo "== gen-cert $model --strategy cubic -o $out/cert.jsonl"
"$PY" -m generator.cli "$model" --strategy cubic -o "$out/cert.jsonl"
echo "== check-cert $out/cert.jsonl --model $model --require 'accuracy >= 0.98'"
"$PY" -m checker "$out/cert.jsonl" --model "$model" --require "accuracy >= 0.98"
