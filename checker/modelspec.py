"""The parameters of the model class, as named in TransformerLens state dicts.

A one-layer, one-head, attention-only transformer with learned positional
embeddings and no LayerNorm or MLP (spec/theorem.md).  Dimensions are
inferred from the tensor shapes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import Malformed

# (state-dict key, shape in terms of v=d_vocab, k=n_ctx, d=d_model, h=d_head, required)
PARAMETERS: tuple[tuple[str, str, bool], ...] = (
    ("embed.W_E", "v d", True),
    ("pos_embed.W_pos", "k d", True),
    ("blocks.0.attn.W_Q", "1 d h", True),
    ("blocks.0.attn.W_K", "1 d h", True),
    ("blocks.0.attn.W_V", "1 d h", True),
    ("blocks.0.attn.W_O", "1 h d", True),
    ("blocks.0.attn.b_Q", "1 h", False),
    ("blocks.0.attn.b_K", "1 h", False),
    ("blocks.0.attn.b_V", "1 h", False),
    ("blocks.0.attn.b_O", "d", False),
    ("unembed.W_U", "d v", True),
    ("unembed.b_U", "v", False),
)
PARAMETER_NAMES = tuple(name for name, _, _ in PARAMETERS)

# Buffers TransformerLens saves that carry no parameters: the causal mask and
# the masking constant.  They are ignored; the semantics is fixed by the spec.
IGNORED_BUFFERS = ("blocks.0.attn.mask", "blocks.0.attn.IGNORE")


@dataclass(frozen=True)
class Dims:
    d_vocab: int
    n_ctx: int
    d_model: int
    d_head: int

    def shape_of(self, name: str) -> tuple[int, ...]:
        """The shape parameter `name` must have for these dimensions."""
        letters = {"v": self.d_vocab, "k": self.n_ctx, "d": self.d_model, "h": self.d_head}
        pattern = dict((n, p) for n, p, _ in PARAMETERS)[name]
        return tuple(1 if c == "1" else letters[c] for c in pattern.split())


def _describe_unexpected(keys: list[str]) -> str:
    kinds = []
    joined = " ".join(keys)
    if any(k.startswith("blocks.") and not k.startswith("blocks.0.") for k in keys):
        kinds.append("more than one layer")
    if "mlp" in joined:
        kinds.append("MLP weights")
    if "ln" in joined or "LayerNorm" in joined or ".norm" in joined:
        kinds.append("LayerNorm weights")
    what = ", ".join(kinds) if kinds else "parameters this model class does not have"
    shown = ", ".join(sorted(keys)[:8]) + (" ..." if len(keys) > 8 else "")
    return f"model has {what}: {shown}"


def infer_dims(shapes: dict[str, tuple[int, ...]]) -> Dims:
    """Check the keys and shapes of a state dict and infer its dimensions.

    Precondition: `shapes` maps every tensor key of the file to its shape.
    Raises Malformed naming what is wrong (missing keys, extra layers, heads,
    MLP or LayerNorm weights, inconsistent shapes).
    """
    unexpected = [k for k in shapes if k not in PARAMETER_NAMES and k not in IGNORED_BUFFERS]
    if unexpected:
        raise Malformed(_describe_unexpected(unexpected))
    missing = [n for n, _, required in PARAMETERS if required and n not in shapes]
    if missing:
        raise Malformed(f"model is missing required tensors: {', '.join(missing)}")
    heads = ("blocks.0.attn.W_Q", "blocks.0.attn.W_K", "blocks.0.attn.W_V", "blocks.0.attn.W_O")
    for name in heads:
        shape = shapes[name]
        if len(shape) != 3:
            raise Malformed(f"{name} has shape {list(shape)}; expected (n_heads, ., .)")
        if shape[0] != 1:
            raise Malformed(f"model has {shape[0]} attention heads ({name} has shape "
                            f"{list(shape)}); only one head is supported")
    for name in ("embed.W_E", "pos_embed.W_pos", "unembed.W_U"):
        if len(shapes[name]) != 2:
            raise Malformed(f"{name} has shape {list(shapes[name])}; expected a matrix")
    d_vocab, d_model = shapes["embed.W_E"]
    n_ctx = shapes["pos_embed.W_pos"][0]
    d_head = shapes["blocks.0.attn.W_Q"][2]
    dims = Dims(d_vocab=d_vocab, n_ctx=n_ctx, d_model=d_model, d_head=d_head)
    for name, _, _ in PARAMETERS:
        if name in shapes and tuple(shapes[name]) != dims.shape_of(name):
            raise Malformed(f"{name} has shape {list(shapes[name])}; expected "
                            f"{list(dims.shape_of(name))} for d_vocab={d_vocab}, n_ctx={n_ctx}, "
                            f"d_model={d_model}, d_head={d_head} (is d_vocab_out != d_vocab?)")
    if min(d_vocab, n_ctx, d_model, d_head) < 1 or n_ctx < 2:
        raise Malformed(f"unsupported dimensions {dims}: need n_ctx >= 2 and positive sizes")
    return dims
