"""Build the worst certificate and model file the checker's default limits admit (memory),
as measured in spec/format.md §resource model.

    python benchmarks/worst_case.py /tmp/wc          # writes cert.jsonl and model.pt there
    /usr/bin/time -v check-cert /tmp/wc/cert.jsonl --jobs 1      # peak RSS: "Maximum resident"
    /usr/bin/time -v python -c "from checker.modelfile import read_model_tensors as r; \\
        r('/tmp/wc/model.pt')"

Both are refused (exit 2) — after the checker has spent the most memory the limits allow.
`--extra N` appends N more 2^20-element lines beyond the stored-element budget (for comparing
with a checker without it).
"""

from __future__ import annotations

import argparse
import io
import sys
import zipfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checker import modelfile  # noqa: E402
from checker.certificate import Limits  # noqa: E402
from checker.modelspec import Dims  # noqa: E402
from generator.certify.trace import Trace  # noqa: E402
from generator.model import ModelWeights  # noqa: E402

CERT_DIMS = Dims(2048, 2, 512, 256)  # W_E and W_U are 2^20 elements each
SHIPPED = ROOT / "generator" / "models" / "max3_v8_seed0.pt"


def worst_certificate(path: Path, extra: int = 0) -> int:
    """Weights (2.5M elements); every weight used as an argument of an arithmetic op (so its
    back-end elements are built, ~420 bytes each); a 2^20-element add; chains of adds, each
    used by the next, up to the stored-element budget; then a 32 MiB line of tiny JSON arrays.
    Returns the stored elements."""
    rng = np.random.default_rng(0)
    w = ModelWeights.zeros(CERT_DIMS)
    w = w.replace(**{n: rng.standard_normal(getattr(w, n).shape).astype(np.float32)
                     for n in ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U")})
    t = Trace(w, float_shadow=False)
    limits = Limits()
    stored = sum(int(np.prod(line["shape"])) for line in t.body)

    def emit(term):
        nonlocal stored
        stored += int(np.prod(t.values[t.emit(term)].shape))
        return term

    for name in ("W_E", "W_pos", "W_Q", "W_K", "W_V", "W_O", "W_U"):
        emit(("mean_rows", ("param", name)))
    e, k = ("param", "W_E"), ("param", "W_K")
    big = emit(("add", e, e))
    prev, block = emit(("add", ("param", "W_Q"), k)), CERT_DIMS.d_model * CERT_DIMS.d_head
    while stored + block <= limits.max_stored_elements:
        prev = emit(("add", prev, k))
    prev = emit(("add", ("mean_rows", e), ("mean_rows", e)))
    while stored + CERT_DIMS.d_model <= limits.max_stored_elements:
        prev = emit(("add", prev, ("mean_rows", e)))
    prev = big
    for _ in range(extra):
        prev = emit(("sub", prev, e))
    lines = t.lines("worst-case", 0, 0, {}, {})[:-1]  # no rule, no qed
    n = limits.max_line_bytes // 4 - 100
    junk = f'{{"id":{len(lines)},"kind":"op","x":[' + ",".join(["[0]"] * n) + "]}"
    path.write_text("\n".join([*lines, junk]) + "\n")
    return stored


def worst_model_file(path: Path) -> None:
    """The shipped parameters plus a float64 storage read through a transposed view up to the
    element limit, data.pkl led by EMPTY_SET opcodes up to the opcode limit, padded to the
    size limit."""
    sd = torch.load(SHIPPED, weights_only=True)["model"]
    side = int((modelfile.MAX_ELEMENTS - sum(v.numel() for v in sd.values())) ** 0.5)
    sd["junk"] = torch.zeros(side, side, dtype=torch.float64).t()
    buf = io.BytesIO()
    torch.save(sd, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    name = next(n for n in members if n.endswith("/data.pkl"))
    pkl = members[name]
    members[name] = pkl[:2] + b"\x8f" * (modelfile.MAX_PICKLE_OPCODES - 600) + pkl[2:]
    size = sum(len(v) for v in members.values())
    members[name.replace("data.pkl", "pad")] = bytes(modelfile.MAX_BYTES - size - 100_000)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for n, data in members.items():
            zf.writestr(n, data)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--extra", type=int, default=0)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stored = worst_certificate(args.out / "cert.jsonl", args.extra)
    worst_model_file(args.out / "model.pt")
    print(f"{args.out}/cert.jsonl: {stored} stored elements "
          f"(budget {Limits().max_stored_elements}); {args.out}/model.pt")


if __name__ == "__main__":
    main()
