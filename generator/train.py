"""Train a Max-of-K model with the paper's recipe (App. B.1).

AdamW (lr 1e-3, betas (0.9, 0.999), weight decay 0.01), batch 128, 3000
steps, each batch fresh i.i.d. uniform sequences, cross-entropy of the
last-position logits against the true maximum.  Biases stay frozen at zero.

Determinism: one torch.Generator seeded with cfg.seed draws the initial
weights and then every batch; training runs single-threaded with
torch.use_deterministic_algorithms, so the same seed gives bit-identical
weights on the same machine/torch build (different CPUs or torch versions
may differ in the last bits).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from checker import HelpFormatter, add_version_option
from checker.errors import Malformed
from checker.modelspec import ACTIVATIONS, NORMALIZATIONS, Dims, Family

from .model import FamilyTransformer, MaxOfKTransformer
from .progress import pipe_safe, unwritable

MAX_EXACT_SEQUENCES = 10 ** 9  # above this the CLI skips the exact-accuracy count


@dataclass(frozen=True)
class TrainConfig:
    d_vocab: int = 64
    n_ctx: int = 4
    d_model: int = 32
    d_head: int = 32
    seed: int = 0
    steps: int = 3000
    batch: int = 128
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    # Model family (checker.modelspec.Family); the defaults are the attention-only model.
    layernorm: str | None = None  # "LN", "LNPre", "RMS" or "RMSPre"
    n_heads: int = 1
    d_mlp: int = 0
    act_fn: str = "relu"  # the MLP's activation (modelspec.ACTIVATIONS)
    rope: bool = False
    rotary_dim: int = 0  # 0: d_head
    rotary_base: int = 10000
    ln_eps: float = 1e-5
    parallel: bool = False
    n_layers: int = 1
    gated_mlp: bool = False  # TransformerLens gated_mlp (SwiGLU with act_fn silu)
    # Recipe fields (generator/recipes.py; attention-only one-layer models only).
    init: str = "paper"  # "paper", "randn" (std 1/sqrt(d_model)) or "tl" (TransformerLens)
    train_biases: bool = False  # the paper freezes every bias at zero

    @property
    def family(self) -> Family:
        return Family(normalization=self.layernorm, n_heads=self.n_heads, d_mlp=self.d_mlp,
                      act_fn=self.act_fn if self.d_mlp else "relu",
                      positional="rotary" if self.rope else "standard",
                      n_ctx=self.n_ctx if self.rope else 0,
                      rotary_dim=(self.rotary_dim or self.d_head) if self.rope else 0,
                      rotary_base=self.rotary_base if self.rope else 0,
                      ln_eps=self.ln_eps if self.layernorm else 0.0, parallel=self.parallel,
                      n_layers=self.n_layers, gated_mlp=self.gated_mlp and self.d_mlp > 0)

    @property
    def dims(self) -> Dims:
        return Dims(d_vocab=self.d_vocab, n_ctx=self.n_ctx, d_model=self.d_model,
                    d_head=self.d_head, family=self.family)

    def validate(self) -> None:
        """Raise ValueError with a clear message if the config is unusable."""
        for name in ("d_vocab", "d_model", "d_head", "steps", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_ctx < 2:
            raise ValueError(f"n_ctx must be >= 2, got {self.n_ctx}")
        if self.d_vocab < 2:
            raise ValueError(f"d_vocab must be >= 2, got {self.d_vocab}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not 0 <= self.seed < 2 ** 63:
            raise ValueError(f"seed must be in [0, 2^63), got {self.seed}")
        if self.gated_mlp and not self.d_mlp:
            raise ValueError("a gated MLP needs an MLP (--mlp D_MLP)")
        from .recipes import INITS

        if self.init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {self.init!r}")
        if (self.init != "paper" or self.train_biases) and not self.family.is_attn_only:
            raise ValueError("--init and --train-biases apply to attention-only one-layer "
                             "models")
        try:
            self.family.validate()
        except Malformed as exc:
            raise ValueError(str(exc)) from None

    def to_json(self) -> dict:
        """The config as plain JSON; n_layers, gated_mlp, init and train_biases only when
        not their defaults (so a model file of an older config is byte for byte as before
        they existed)."""
        d = asdict(self)
        d["betas"] = list(self.betas)
        for name, default in (("n_layers", 1), ("gated_mlp", False), ("init", "paper"),
                              ("train_biases", False)):
            if d[name] == default:
                del d[name]
        return d


@dataclass(frozen=True)
class TrainResult:
    model: MaxOfKTransformer
    final_loss: float  # mean loss over the last min(100, steps) steps
    final_batch_accuracy: float  # argmax accuracy over the same steps (informational)
    seconds: float


@contextlib.contextmanager
def _deterministic_torch():
    """Single thread + deterministic algorithms, restored afterwards."""
    threads = torch.get_num_threads()
    det = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)  # tiny matmuls: one thread is as fast and fixes the reduction order
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(det)
        torch.set_num_threads(threads)


def train_with_stats(cfg: TrainConfig, progress: bool = True) -> TrainResult:
    """Train one model.  Pre: cfg.validate() passes.  Post: deterministic in cfg."""
    cfg.validate()
    t0 = time.perf_counter()
    with _deterministic_torch():
        gen = torch.Generator().manual_seed(cfg.seed)
        if cfg.family.is_attn_only:
            model = MaxOfKTransformer(cfg.dims, generator=gen, init_std=_init_std(cfg),
                                      train_biases=cfg.train_biases)
            if cfg.init == "tl":
                _load_tl_init(model, cfg)
        else:
            model = FamilyTransformer(cfg.dims, generator=gen)
        params = [p for p in model.parameters() if p.requires_grad]  # biases stay zero
        opt = torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas,
                                weight_decay=cfg.weight_decay)
        tail = min(100, cfg.steps)
        losses, hits = [], 0
        for step in _steps(cfg.steps, progress):
            tokens = torch.randint(0, cfg.d_vocab, (cfg.batch, cfg.n_ctx), generator=gen)
            target = tokens.max(dim=1).values
            logits = model(tokens)
            loss = F.cross_entropy(logits, target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if step >= cfg.steps - tail:
                losses.append(loss.item())
                hits += int((logits.argmax(dim=1) == target).sum())
        model.eval()
    return TrainResult(model=model, final_loss=sum(losses) / tail,
                       final_batch_accuracy=hits / (tail * cfg.batch),
                       seconds=time.perf_counter() - t0)


def _init_std(cfg: TrainConfig) -> float | None:
    """The recipe's weight scale: randn/sqrt(d_model) for "randn", else the paper's."""
    return 1 / cfg.d_model ** 0.5 if cfg.init == "randn" else None


def _load_tl_init(model: MaxOfKTransformer, cfg: TrainConfig) -> None:
    """Replace the model's weights by those TransformerLens's HookedTransformer draws for
    the same architecture with seed cfg.seed (its own init; biases zero, as ours)."""
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError:
        raise ValueError("the tl recipe needs TransformerLens 3.x (pip install "
                         "'maxk-certify[interop]')") from None
    tl_cfg = HookedTransformerConfig(
        n_layers=1, d_model=cfg.d_model, d_head=cfg.d_head, n_heads=1, d_vocab=cfg.d_vocab,
        n_ctx=cfg.n_ctx, attn_only=True, normalization_type=None, seed=cfg.seed,
        positional_embedding_type="standard", device="cpu")
    state = HookedTransformer(tl_cfg).state_dict()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(state[name].reshape(p.shape))


def train(cfg: TrainConfig, progress: bool = True) -> MaxOfKTransformer:
    """Train with cfg and return the model (see train_with_stats)."""
    return train_with_stats(cfg, progress).model


def training_metadata(cfg: TrainConfig, result: TrainResult) -> dict:
    """What the model file records about its training.  No wall-clock times:
    the file's bytes (and sha256) must depend only on the config."""
    return {"train_config": cfg.to_json(), "final_loss": result.final_loss,
            "final_batch_accuracy": result.final_batch_accuracy,
            "torch_version": str(torch.__version__)}


def _steps(n: int, progress: bool):
    if not progress:
        return range(n)
    from tqdm import tqdm

    # disable=None: silent when stderr is not a terminal (logs, CI).
    return tqdm(range(n), file=sys.stderr, disable=None, desc="training", unit="step")


def _parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    p = argparse.ArgumentParser(
        prog="train-max-of-k", formatter_class=HelpFormatter,
        description="Train a Max-of-K transformer with the paper's recipe and report "
                    "its exact accuracy: one layer attention-only by default, or of another "
                    "supported family (several layers, LayerNorm or RMSNorm, an MLP with "
                    "ReLU/GELU/SiLU, gated or not, RoPE, several heads, parallel residual).",
        epilog="examples:\n"
               "  train-max-of-k --out m.pt                      # the paper's Max-of-4 model\n"
               "  train-max-of-k --out m.pt --d-vocab 8 --n-ctx 3 --d-model 16 --d-head 8 \\\n"
               "      --layernorm LN --mlp 32 --rope --n-heads 2  # a family model")
    add_version_option(p)
    p.add_argument("--out", required=True, help="output file (.pt/.pth or .safetensors)")
    p.add_argument("--d-vocab", type=int, default=d.d_vocab, help="tokens")
    p.add_argument("--n-ctx", type=int, default=d.n_ctx, help="sequence length")
    p.add_argument("--d-model", type=int, default=d.d_model, help="residual width")
    p.add_argument("--d-head", type=int, default=d.d_head, help="attention head width")
    p.add_argument("--seed", type=int, default=d.seed,
                   help="seed of the initial weights and of every batch")
    p.add_argument("--steps", type=int, default=d.steps, help="training steps")
    p.add_argument("--batch", type=int, default=d.batch, help="sequences per batch")
    p.add_argument("--lr", type=float, default=d.lr, help="AdamW learning rate")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay, help="AdamW weight decay")
    p.add_argument("--layernorm", choices=list(NORMALIZATIONS[1:]), default=None,
                   help="LayerNorm or RMSNorm before attention, MLP and unembedding "
                        "(TransformerLens normalization_type)")
    p.add_argument("--n-heads", type=int, default=d.n_heads, help="attention heads")
    p.add_argument("--mlp", type=int, default=d.d_mlp, metavar="D_MLP",
                   help="add an MLP of this width (0: attention-only)")
    p.add_argument("--act-fn", choices=list(ACTIVATIONS), default=d.act_fn,
                   help="with --mlp: the activation (spec/rules.md §Activations)")
    p.add_argument("--rope", action="store_true",
                   help="rotary positions (rotate-half) instead of a positional embedding")
    p.add_argument("--rotary-dim", type=int, default=d.rotary_dim,
                   help="with --rope: rotated dimensions (0: d_head)")
    p.add_argument("--rotary-base", type=int, default=d.rotary_base,
                   help="with --rope: base of the angles")
    p.add_argument("--ln-eps", type=float, default=d.ln_eps, help="with --layernorm: epsilon")
    p.add_argument("--parallel", action="store_true",
                   help="parallel attention and MLP (GPT-NeoX residual)")
    p.add_argument("--n-layers", type=int, default=d.n_layers,
                   help="transformer blocks (certified by forward brute force when > 1)")
    p.add_argument("--gated-mlp", action="store_true",
                   help="with --mlp: TransformerLens's gated MLP φ(x W_gate) ⊙ (x W_in) + b_in "
                        "(SwiGLU with --act-fn silu)")
    p.add_argument("--init", choices=["paper", "randn", "tl"], default=d.init,
                   help="initial weights (generator/recipes.py): the paper's N(0, 0.64/d_model), "
                        "randn/sqrt(d_model), or TransformerLens's own (seeded by --seed)")
    p.add_argument("--train-biases", action="store_true",
                   help="train the biases too (the paper keeps them at zero)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--no-exact", action="store_true",
                   help="skip counting the exact accuracy over all sequences")
    return p


@pipe_safe
def main(argv: list[str] | None = None) -> int:
    """CLI; exit 0 on success, 2 on a bad argument."""
    from .ground_truth import count_correct
    from .modelfile import SAFETENSORS_SUFFIX, TORCH_SUFFIXES, save_model

    parser = _parser()
    args = parser.parse_args(argv)
    cfg = TrainConfig(d_vocab=args.d_vocab, n_ctx=args.n_ctx, d_model=args.d_model,
                      d_head=args.d_head, seed=args.seed, steps=args.steps, batch=args.batch,
                      lr=args.lr, weight_decay=args.weight_decay, layernorm=args.layernorm,
                      n_heads=args.n_heads, d_mlp=args.mlp, act_fn=args.act_fn, rope=args.rope,
                      rotary_dim=args.rotary_dim, rotary_base=args.rotary_base,
                      ln_eps=args.ln_eps, parallel=args.parallel, n_layers=args.n_layers,
                      gated_mlp=args.gated_mlp, init=args.init,
                      train_biases=args.train_biases)
    try:
        cfg.validate()
    except ValueError as exc:
        parser.error(str(exc))  # exits 2
    if not args.out.lower().endswith(TORCH_SUFFIXES + (SAFETENSORS_SUFFIX,)):
        parser.error(f"--out {args.out!r}: use a .pt, .pth or .safetensors file name")
    why = unwritable(args.out)  # before training, not after
    if why:
        parser.error(f"cannot write --out {args.out}: {why}")
    result = train_with_stats(cfg, progress=not args.no_progress)
    weights = result.model.weights()
    meta = training_metadata(cfg, result)
    try:
        sha = save_model(args.out, weights, meta)
    except OSError as exc:
        print(f"train-max-of-k: error: cannot write {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"saved {args.out} (sha256 {sha}); trained {cfg.steps} steps in "
          f"{result.seconds:.1f} s, final loss {result.final_loss:.4g}")
    total = cfg.d_vocab ** cfg.n_ctx
    if args.no_exact or total > MAX_EXACT_SEQUENCES:
        print(f"exact accuracy not computed ({total} sequences)")
        return 0
    gt = count_correct(weights, progress=False if args.no_progress else None)
    print(f"exact accuracy: {gt.correct} / {gt.total} = {gt.accuracy:.8f} "
          f"(ties {gt.ties}; counted in {gt.seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
