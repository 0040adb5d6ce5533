"""The untrusted side: training, model files, ground truth and proof search.

Nothing here is trusted by the checker; every claim the generator makes ends
up in a certificate that `checker/` re-verifies from the model file alone.
"""


def choose_named(text: str, table: dict, what: str) -> list:
    """'a,b' -> [table['a'], table['b']], in order, without repeats ('all': every entry);
    ValueError naming the unknown ones (`what`: the plural the message uses, e.g. 'recipes')."""
    names = list(table) if text.strip() == "all" else \
        list(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    unknown = [n for n in names if n not in table]
    if unknown or not names:
        raise ValueError(f"unknown {what} {unknown} (choose from {', '.join(table)}, or all)")
    return [table[n] for n in names]
