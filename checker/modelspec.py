"""The parameters of the model families, as named in TransformerLens state dicts.

One table (`parameter_table`) lists, for every family, each parameter's state
dict key, its short name (the term `("param", short)` of definitions.py), its
shape and whether a file may omit it.  The checker, the generator and the
model-file binding all read parameters from this one table (spec/theorem.md §1).

The attention-only family (`ATTN_ONLY`, one head, learned positions, no
LayerNorm, no MLP) is the original model class; its table is `PARAMETERS`.
Dimensions are inferred from the tensor shapes (and n_ctx from the family
for rotary models, which have no positional embedding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import Malformed

NORMALIZATIONS = (None, "LN", "LNPre", "RMS", "RMSPre")  # RMS: no centring, no bias
POSITIONALS = ("standard", "rotary")
ACTIVATIONS = ("relu", "gelu", "gelu_new", "gelu_fast", "silu")  # spec/rules.md §Activations
# Library names of the same real functions: TransformerLens's and Hugging Face's
# gelu_pytorch_tanh is torch's tanh form, gelu_new's formula; swish is silu.
ACTIVATION_ALIASES = {"gelu_pytorch_tanh": "gelu_new", "swish": "silu"}
# RoPE angles i·θ_j are enclosed by Taylor series (checker/elementary.py); their
# cost grows with the angle, so rotary models are limited to this many positions.
MAX_ROTARY_CTX = 256


@dataclass(frozen=True)
class Family:
    """A model family (spec/theorem.md §1b): one layer unless n_layers says more.

    normalization: None, "LN" (learned w, b) or "LNPre" (no weights), applied
    before attention, before the MLP and before the unembedding; ln_eps is the
    binary64 ε of every LayerNorm.  d_mlp = 0 means no MLP (attention-only).
    positional "rotary" means RoPE (rotate-half pairing) on the first
    rotary_dim query/key coordinates with base rotary_base, exact angles, and
    no positional embedding; n_ctx is then given here (else it is W_pos's rows
    and n_ctx here is 0).  parallel: attention and MLP both read the residual
    stream before the block (GPT-NeoX) instead of the MLP reading after attention.
    """

    normalization: str | None = None
    n_heads: int = 1
    d_mlp: int = 0
    act_fn: str = "relu"
    positional: str = "standard"
    n_ctx: int = 0
    rotary_dim: int = 0
    rotary_base: int = 0
    ln_eps: float = 0.0
    parallel: bool = False
    n_layers: int = 1
    gated_mlp: bool = False

    def validate(self) -> None:
        """Raise Malformed naming what is unsupported or inconsistent."""
        if self.normalization not in NORMALIZATIONS:
            raise Malformed(f"unsupported normalization {self.normalization!r} "
                            f"(supported: LN, LNPre, RMS, RMSPre or none)")
        if type(self.n_heads) is not int or not 1 <= self.n_heads <= 64:
            raise Malformed(f"n_heads must be an integer in [1, 64], got {self.n_heads!r}")
        if type(self.d_mlp) is not int or not 0 <= self.d_mlp <= 1 << 14:
            raise Malformed(f"d_mlp must be an integer in [0, 16384], got {self.d_mlp!r}")
        if self.act_fn not in ACTIVATIONS:
            raise Malformed(f"unsupported activation {self.act_fn!r} (supported: "
                            f"{', '.join(ACTIVATIONS)})")
        if self.positional not in POSITIONALS:
            raise Malformed(f"unsupported positional embedding {self.positional!r} "
                            "(supported: standard, rotary)")
        if type(self.parallel) is not bool:
            raise Malformed("parallel must be true or false")
        if self.parallel and self.d_mlp == 0:
            raise Malformed("a parallel residual needs an MLP")
        _need(type(self.ln_eps) is float, f"ln_eps must be a float, got {self.ln_eps!r}")
        if self.normalization is None:
            _need(self.ln_eps == 0.0, "ln_eps must be 0.0 without LayerNorm")
        else:
            _need(type(self.ln_eps) is float and math.isfinite(self.ln_eps)
                  and self.ln_eps > 0, f"ln_eps must be a positive float, got {self.ln_eps!r}")
        _need(type(self.n_layers) is int and 1 <= self.n_layers <= MAX_LAYERS,
              f"n_layers must be an integer in [1, {MAX_LAYERS}], got {self.n_layers!r}")
        _need(type(self.gated_mlp) is bool, "gated_mlp must be true or false")
        _need(not self.gated_mlp or self.d_mlp > 0, "a gated MLP needs d_mlp >= 1")
        if self.positional == "rotary":
            _need(type(self.n_ctx) is int and 2 <= self.n_ctx <= MAX_ROTARY_CTX,
                  f"a rotary model needs n_ctx in [2, {MAX_ROTARY_CTX}], got {self.n_ctx!r}")
            _need(type(self.rotary_dim) is int and self.rotary_dim >= 2
                  and self.rotary_dim % 2 == 0, f"rotary_dim must be even and >= 2, got "
                  f"{self.rotary_dim!r}")
            _need(type(self.rotary_base) is int and 2 <= self.rotary_base <= 1 << 20,
                  f"rotary_base must be an integer in [2, 2^20], got {self.rotary_base!r}")
        else:
            _need(self.n_ctx == 0 and self.rotary_dim == 0 and self.rotary_base == 0,
                  "n_ctx, rotary_dim and rotary_base must be 0 without rotary positions")

    @property
    def is_attn_only(self) -> bool:
        """The original model class (the decomposition rules apply only to it)."""
        return self == ATTN_ONLY

    @property
    def is_one_layer_dense(self) -> bool:
        """One layer, no gated MLP: the families the bulk (Arb) forward pass and the
        overwhelm_family rule were written for."""
        return self.n_layers == 1 and not self.gated_mlp

    def to_json(self) -> dict:
        """The header's family object: FAMILY_FIELDS, and the OPTIONAL_FIELDS only where
        they differ from their defaults (canonical: the weights digest hashes it)."""
        out = {f: getattr(self, f) for f in FAMILY_FIELDS}
        out.update({f: getattr(self, f) for f, default in OPTIONAL_FIELDS.items()
                    if getattr(self, f) != default})
        return out

    def all_fields(self) -> dict:
        """Every field, defaults included (for messages comparing two families)."""
        return {f: getattr(self, f) for f in (*FAMILY_FIELDS, *OPTIONAL_FIELDS)}

    @classmethod
    def from_json(cls, obj: object) -> Family:
        """Parse a header's "family" object (FAMILY_FIELDS required, OPTIONAL_FIELDS
        optional, nothing else); Malformed if bad."""
        if (not isinstance(obj, dict) or not set(FAMILY_FIELDS) <= set(obj)
                or not set(obj) <= set(FAMILY_FIELDS) | set(OPTIONAL_FIELDS)):
            raise Malformed(f"family must be an object with exactly the fields "
                            f"{list(FAMILY_FIELDS)} and optionally {list(OPTIONAL_FIELDS)}")
        family = cls(**obj)
        family.validate()
        return family


FAMILY_FIELDS = ("normalization", "n_heads", "d_mlp", "act_fn", "positional", "n_ctx",
                 "rotary_dim", "rotary_base", "ln_eps", "parallel")
# issue 21: fields a header may omit, with their defaults (absent = as before they existed)
OPTIONAL_FIELDS = {"n_layers": 1, "gated_mlp": False}
MAX_LAYERS = 64
ATTN_ONLY = Family()


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise Malformed(message)


@dataclass(frozen=True)
class Param:
    key: str  # TransformerLens state dict key
    short: str  # name in terms: ("param", short)
    pattern: str  # shape in letters v k d h n(heads) m(d_mlp); "1" a literal 1
    required: bool


def layer_short(layer: int, short: str) -> str:
    """The short name of a layer's parameter: layer 0's as before layers existed
    (`W_Q`, `ln1.w`, ...), layer l >= 1's prefixed `blocks.{l}.` (`blocks.1.W_Q`)."""
    return short if layer == 0 else f"blocks.{layer}.{short}"


def parameter_table(family: Family = ATTN_ONLY) -> tuple[Param, ...]:
    """The family's parameters in certificate order (spec/format.md §weight): the
    embeddings, then each layer's block in turn, then the final norm and unembedding."""
    ln = family.normalization in ("LN", "RMS")  # learned weights (LN also biases)
    bias = family.normalization == "LN"
    mlp = family.d_mlp > 0

    def norm(prefix: str, short: str) -> list:
        return [Param(f"{prefix}.w", f"{short}.w", "d", True)] + (
            [Param(f"{prefix}.b", f"{short}.b", "d", True)] if bias else [])

    out = [Param("embed.W_E", "W_E", "v d", True)]
    if family.positional == "standard":
        out.append(Param("pos_embed.W_pos", "W_pos", "k d", True))
    for layer in range(family.n_layers):
        b = f"blocks.{layer}"

        def s(short: str, layer: int = layer) -> str:
            return layer_short(layer, short)

        if ln:
            out += norm(f"{b}.ln1", s("ln1"))
        out += [Param(f"{b}.attn.W_{x}", s(f"W_{x}"), "n d h", True) for x in "QKV"]
        out.append(Param(f"{b}.attn.W_O", s("W_O"), "n h d", True))
        out += [Param(f"{b}.attn.b_{x}", s(f"b_{x}"), "n h", False) for x in "QKV"]
        out.append(Param(f"{b}.attn.b_O", s("b_O"), "d", False))
        if ln and mlp:
            out += norm(f"{b}.ln2", s("ln2"))
        if mlp:
            out += [Param(f"{b}.mlp.W_in", s("W_in"), "d m", True),
                    Param(f"{b}.mlp.b_in", s("b_in"), "m", False)]
            if family.gated_mlp:
                out.append(Param(f"{b}.mlp.W_gate", s("W_gate"), "d m", True))
            out += [Param(f"{b}.mlp.W_out", s("W_out"), "m d", True),
                    Param(f"{b}.mlp.b_out", s("b_out"), "d", False)]
    if ln:
        out += norm("ln_final", "ln_final")
    out += [Param("unembed.W_U", "W_U", "d v", True), Param("unembed.b_U", "b_U", "v", False)]
    return tuple(out)


# The attention-only table as (key, shape, required), as before families existed.
PARAMETERS: tuple[tuple[str, str, bool], ...] = tuple(
    (p.key, p.pattern.replace("n", "1"), p.required) for p in parameter_table(ATTN_ONLY))
PARAMETER_NAMES = tuple(name for name, _, _ in PARAMETERS)

# Buffers TransformerLens saves that carry no parameters: the causal mask, the
# masking constant and (rotary models) the float32 sin/cos tables, which the
# theorem replaces by exact angles.  They are ignored.
IGNORED_BUFFERS = ("blocks.0.attn.mask", "blocks.0.attn.IGNORE")
ROTARY_BUFFERS = ("blocks.0.attn.rotary_sin", "blocks.0.attn.rotary_cos")


def ignored_buffers(family: Family) -> tuple[str, ...]:
    """The buffers of every layer of `family` that carry no parameters (ignored)."""
    names = ("mask", "IGNORE") + (("rotary_sin", "rotary_cos")
                                  if family.positional == "rotary" else ())
    return tuple(f"blocks.{layer}.attn.{n}" for layer in range(family.n_layers) for n in names)


def matrix_shape(tl_shape: tuple[int, ...]) -> tuple[int, int]:
    """The 2-D matrix a parameter denotes in ops and rules: all leading axes
    flattened into rows, so (n, d, h) -> (n·d, h) (head j is rows j·d..), (n, h) ->
    (n, h) and a vector (c,) -> one row (1, c).  With one head this drops the head axis."""
    return (math.prod(tl_shape[:-1]), tl_shape[-1])


@dataclass(frozen=True)
class Dims:
    d_vocab: int
    n_ctx: int
    d_model: int
    d_head: int
    family: Family = field(default=ATTN_ONLY)

    @property
    def n_heads(self) -> int:
        return self.family.n_heads

    def shape_of(self, name: str) -> tuple[int, ...]:
        """The shape parameter `name` (a state dict key) must have for these dimensions."""
        letters = {"v": self.d_vocab, "k": self.n_ctx, "d": self.d_model, "h": self.d_head,
                   "n": self.family.n_heads, "m": self.family.d_mlp}
        pattern = {p.key: p.pattern for p in parameter_table(self.family)}[name]
        return tuple(1 if c == "1" else letters[c] for c in pattern.split())


def _describe_unexpected(keys: list[str], family: Family) -> str:
    kinds = []
    joined = " ".join(keys)
    layers = {int(k.split(".")[1]) for k in keys
              if k.startswith("blocks.") and k.split(".")[1].isdigit()}
    if any(layer >= family.n_layers for layer in layers):
        kinds.append("more than one layer" if family.n_layers == 1
                     else f"more than {family.n_layers} layers")
    if family.d_mlp and not family.gated_mlp and "W_gate" in joined:
        kinds.append("a gated MLP (W_gate)")
    if "mlp" in joined:
        kinds.append("MLP weights")
    if "ln" in joined or "LayerNorm" in joined or ".norm" in joined:
        kinds.append("LayerNorm weights")
    what = ", ".join(kinds) if kinds else "parameters this model class does not have"
    shown = ", ".join(sorted(keys)[:8]) + (" ..." if len(keys) > 8 else "")
    hint = (" (a model with LayerNorm, MLP, RoPE, several heads or layers needs its config: see "
            "README, model families)" if family.is_attn_only and kinds else "")
    return f"model has {what}: {shown}{hint}"


def infer_dims(shapes: dict[str, tuple[int, ...]], family: Family = ATTN_ONLY) -> Dims:
    """Check the keys and shapes of a state dict against `family` and infer its dimensions.

    Precondition: `shapes` maps every tensor key of the file to its shape.
    Raises Malformed naming what is wrong (missing keys, extra layers, heads,
    MLP or LayerNorm weights, inconsistent shapes).
    """
    family.validate()
    table = parameter_table(family)
    names = {p.key for p in table}
    ignored = ignored_buffers(family)
    unexpected = [k for k in shapes if k not in names and k not in ignored]
    if unexpected:
        raise Malformed(_describe_unexpected(unexpected, family))
    missing = [p.key for p in table if p.required and p.key not in shapes]
    if missing:
        raise Malformed(f"model is missing required tensors: {', '.join(missing)}")
    heads = [f"blocks.{layer}.attn.W_{x}" for layer in range(family.n_layers) for x in "QKVO"]
    for name in heads:
        shape = shapes[name]
        if len(shape) != 3:
            raise Malformed(f"{name} has shape {list(shape)}; expected (n_heads, ., .)")
        if shape[0] != family.n_heads:
            raise Malformed(f"model has {shape[0]} attention heads ({name} has shape "
                            f"{list(shape)}); " + ("only one head is supported without a "
                            "config" if family.is_attn_only else
                            f"its config says n_heads = {family.n_heads}"))
    matrices = ["embed.W_E", "unembed.W_U"]
    if family.positional == "standard":
        matrices.append("pos_embed.W_pos")
    for name in matrices:
        if len(shapes[name]) != 2:
            raise Malformed(f"{name} has shape {list(shapes[name])}; expected a matrix")
    d_vocab, d_model = shapes["embed.W_E"]
    n_ctx = shapes["pos_embed.W_pos"][0] if family.positional == "standard" else family.n_ctx
    d_head = shapes["blocks.0.attn.W_Q"][2]
    dims = Dims(d_vocab=d_vocab, n_ctx=n_ctx, d_model=d_model, d_head=d_head, family=family)
    for p in table:
        if p.key in shapes and tuple(shapes[p.key]) != dims.shape_of(p.key):
            raise Malformed(f"{p.key} has shape {list(shapes[p.key])}; expected "
                            f"{list(dims.shape_of(p.key))} for d_vocab={d_vocab}, n_ctx={n_ctx}, "
                            f"d_model={d_model}, d_head={d_head} (is d_vocab_out != d_vocab?)")
    if min(d_vocab, n_ctx, d_model, d_head) < 1 or n_ctx < 2:
        raise Malformed(f"unsupported dimensions {dims}: need n_ctx >= 2 and positive sizes")
    if family.positional == "rotary" and family.rotary_dim > d_head:
        raise Malformed(f"rotary_dim {family.rotary_dim} exceeds d_head {d_head}")
    return dims
