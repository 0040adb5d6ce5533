#!/usr/bin/env bash
# The README's main job: certify the shipped Max-of-4 model and audit the certificate.
set -euo pipefail
cd "$(dirname "$0")/.."
model=generator/models/max4_v64_seed0.pt
out=${DEMO_OUT:-/tmp/maxk-demo}
mkdir -p "$out"
echo "== exact accuracy (float64, all 64^4 sequences; an evaluation, not a proof)"
exact-accuracy "$model"
echo "== gen-cert --strategy cubic $model > $out/cert.jsonl"
gen-cert "$model" --strategy cubic > "$out/cert.jsonl"
echo "== check-cert $out/cert.jsonl --model $model --require 'accuracy >= 0.98'"
check-cert "$out/cert.jsonl" --model "$model" --require "accuracy >= 0.98"
