"""The model's quantities as terms: what EQKE, EVOU, ... *are* (spec/theorem.md §3).

A term is a nested tuple: ("param", name) for a weight, or (op, *argument
terms, *integer parameters) for a recorded operation.  A proof rule accepts an
input only if its term is structurally equal to the definition below, so the
generator cannot feed a rule a matrix that merely claims to be EQKE.
"""

from __future__ import annotations

from .modelspec import Dims, parameter_table


def W(name: str) -> tuple:
    return ("param", name)


def model_terms(dims: Dims) -> dict[str, tuple]:
    """The canonical terms of the model's quantities.

    Every family: each weight by its short name (modelspec.parameter_table),
    and for rotary models ROPE_COS / ROPE_SIN, the (n_ctx × rotary_dim/2)
    tables cos(i·θ_j), sin(i·θ_j), θ_j = rotary_base^(−2j/rotary_dim)
    (ops rope_cos / rope_sin with params n_ctx, rotary_dim, rotary_base).
    The attention-only family also has the decomposition below.
    """
    f = dims.family
    terms = {p.short: W(p.short) for p in parameter_table(f)}
    if f.positional == "rotary":
        for op in ("rope_cos", "rope_sin"):
            terms[op.upper()] = (op, dims.n_ctx, f.rotary_dim, f.rotary_base)
    if f.is_attn_only:
        terms.update(decomposition_terms(dims))
    return terms


def decomposition_terms(dims: Dims) -> dict[str, tuple]:
    """The canonical terms of the five matrices of the paper's decomposition.

    With h0_i = E[t_i] + P_i, P̄ = mean_i P_i, P̂ = P − P̄, Ē = E + P̄,
    E_q = E + P_{n_ctx−1} (the query position):
      EQKE[q, t] = (E_q[q] W_Q + b_Q) · (Ē[t] W_K + b_K) / sqrt(d_head)      (v × v)
      EQKP[q, i] = (E_q[q] W_Q + b_Q) · (P̂_i W_K) / sqrt(d_head)             (v × k)
      EVOU[t, o] = ((Ē[t] W_V + b_V) W_O W_U)[o]                              (v × v)
      PVOU[i, o] = (P̂_i W_V W_O W_U)[o]                                        (k × v)
      EU[q, o]   = ((E_q[q] + b_O) W_U + b_U)[o]                               (v × v)
      EXP_EQKE = exp(EQKE), EXP_EQKP = exp(EQKP) elementwise
      QUERY_TOK = E_q W_Q + b_Q, KEY_TOK = (Ē W_K + b_K)/sqrt(d_head)          (v × d_head)
        (EQKE's factors: EQKE = QUERY_TOK · KEY_TOK^T; low-rank EQKE, spec/rules.md)
      EU_LEFT = E_q + b_O                                                    (v × d_model)
        (EU's left factor: EU = EU_LEFT · W_U + b_U; low-rank EU, spec/rules.md)
    so that the logits at the last position are
      ℓ_o = EU[q, o] + Σ_i a_i (EVOU[t_i, o] + PVOU[i, o]),
      a = softmax_i(EQKE[q, t_i] + EQKP[q, i]).
    """
    k, h = dims.n_ctx, dims.d_head
    p_bar = ("mean_rows", W("W_pos"))
    e_bar = ("add", W("W_E"), p_bar)
    p_hat = ("sub", W("W_pos"), p_bar)
    e_q = ("add", W("W_E"), ("row", W("W_pos"), k - 1))
    query = ("add", ("matmul", e_q, W("W_Q")), W("b_Q"))
    key_tok = ("add", ("matmul", e_bar, W("W_K")), W("b_K"))
    key_pos = ("matmul", p_hat, W("W_K"))
    value_tok = ("add", ("matmul", e_bar, W("W_V")), W("b_V"))
    eqke = ("div_sqrt", ("matmul", query, ("transpose", key_tok)), h)
    eqkp = ("div_sqrt", ("matmul", query, ("transpose", key_pos)), h)
    return {
        "EQKE": eqke,
        "EQKP": eqkp,
        "EXP_EQKE": ("exp", eqke),
        "EXP_EQKP": ("exp", eqkp),
        "EVOU": ("matmul", ("matmul", value_tok, W("W_O")), W("W_U")),
        "PVOU": ("matmul", ("matmul", ("matmul", p_hat, W("W_V")), W("W_O")), W("W_U")),
        "EU": ("add", ("matmul", ("add", e_q, W("b_O")), W("W_U")), W("b_U")),
        "QUERY_TOK": query,
        "KEY_TOK": ("div_sqrt", key_tok, h),
        "EU_LEFT": ("add", e_q, W("b_O")),
    }


def query_terms(dims: Dims, q: int, p: int) -> dict[str, tuple]:
    """The query-dependent quantities for query token q at position p (spec/overwhelm.md §2),
    one row each, so that every p < n_ctx has its own terms (those above fix p = n_ctx − 1):

      EQKE_Q[t] = (E_qp W_Q + b_Q) · (Ē[t] W_K + b_K) / sqrt(d_head)      (1 × v)
      EQKP_Q[i] = (E_qp W_Q + b_Q) · (P̂_i W_K) / sqrt(d_head)              (1 × k)
      EU_Q[o]   = ((E_qp + b_O) W_U + b_U)[o]                               (1 × v)
      EXP_EQKE_Q, EXP_EQKP_Q = their elementwise exp,
    with E_qp = E[q] + P_p.  Keys and values (Ē, P̂, EVOU, PVOU) are those of model_terms:
    x_i = Ē[t_i] + P̂_i holds at every position i.
    """
    h = dims.d_head
    p_bar = ("mean_rows", W("W_pos"))
    e_bar = ("add", W("W_E"), p_bar)
    p_hat = ("sub", W("W_pos"), p_bar)
    e_qp = ("add", ("row", W("W_E"), q), ("row", W("W_pos"), p))
    query = ("add", ("matmul", e_qp, W("W_Q")), W("b_Q"))
    key_tok = ("add", ("matmul", e_bar, W("W_K")), W("b_K"))
    key_pos = ("matmul", p_hat, W("W_K"))
    eqke = ("div_sqrt", ("matmul", query, ("transpose", key_tok)), h)
    eqkp = ("div_sqrt", ("matmul", query, ("transpose", key_pos)), h)
    return {
        "EXP_EQKE_Q": ("exp", eqke),
        "EXP_EQKP_Q": ("exp", eqkp),
        "EU_Q": ("add", ("matmul", ("add", e_qp, W("b_O")), W("W_U")), W("b_U")),
    }
