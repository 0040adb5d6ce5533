"""An LALR(1) driver for lark's stored tables of statement.lark (statement_tables.py), so that
a check need not import lark (~0.02 s of every run; issue 22).  lark itself builds the tables
(scripts/statement_tables.py); this module only runs them, as lark's LALR front end does:

* the contextual lexer: at each parser state, the terminals that state accepts (and the
  ignored ones), tried as one alternation in lark's order — priority, then the pattern's
  largest width, then its length, then the name, each decreasing but the name — first match
  wins (Python's `re`, as lark's);
* the shift/reduce loop over the states' actions (0: shift to a state, 1: reduce by a rule);
* lark's tree shaping: tokens of string literals are dropped (`filter_out`), a rule whose name
  starts with "_" is spliced into its parent, an `expand1` rule (`?value`) without an alias
  with one child is that child, a rule with an alias is named by it; once the whole text has
  parsed, the rules (a method per rule or alias name) are called bottom-up, as lark's
  Transformer does on the finished tree.

tests/test_statement_tables.py runs it against lark on every shipped statement, their
prefixes and random statements: the same atoms, or both refuse."""

from __future__ import annotations

import re


class ParseError(ValueError):
    """The text is not a statement (the message names the position)."""


class _Spliced(list):
    """The children of a rule whose name starts with '_': spliced into the parent's."""


class _Node:
    """A reduction whose rule is called once the whole text has parsed (as lark transforms
    its finished tree: a syntax error anywhere comes before any rule's own error)."""

    __slots__ = ("name", "children")

    def __init__(self, name: str, children: list):
        self.name, self.children = name, children

    def value(self, rules):
        return getattr(rules, self.name)([c.value(rules) if isinstance(c, _Node) else c
                                          for c in self.children])


def _resolve(x, memo):
    if isinstance(x, dict):
        if set(x) == {"@"}:
            return _resolve(memo[x["@"]], memo)
        return {k: _resolve(v, memo) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_resolve(v, memo) for v in x]
    return x


def _regex(pattern: dict) -> str:
    """A terminal's pattern as a regular expression (a string literal escaped)."""
    value = pattern["value"]
    return value if pattern["__type__"] == "PatternRE" else re.escape(value)


def _order(terminal: dict) -> tuple:
    """lark's order of a lexer's terminals: priority, largest width (a string literal's is its
    length), pattern length, all decreasing, then the name."""
    pattern = terminal["pattern"]
    width = pattern["_width"][1] if pattern["__type__"] == "PatternRE" else len(pattern["value"])
    return (-terminal["priority"], -width, -len(pattern["value"]), terminal["name"])


class Parser:
    def __init__(self, data: dict, memo: dict):
        table = data["parser"]["parser"]
        lexer = _resolve(data["parser"]["lexer_conf"], memo)
        names = table["tokens"]
        self.states = {s: {names[t]: (a, _resolve(arg, memo) if a == 1 else arg)
                           for t, (a, arg) in row.items()} for s, row in table["states"].items()}
        self.start, self.end = table["start_states"]["start"], table["end_states"]["start"]
        self.ignore = set(lexer["ignore"])
        self.terminals = {t["name"]: t for t in lexer["terminals"]}
        self._lexers: dict = {}

    def _lexer(self, state):
        """The compiled alternation of the terminals `state` accepts, plus the ignored ones."""
        if state not in self._lexers:
            accepted = [self.terminals[n] for n in self.states[state] if n in self.terminals]
            accepted += [self.terminals[n] for n in self.ignore]
            accepted.sort(key=_order)
            alternation = "|".join(f"(?P<{t['name']}>{_regex(t['pattern'])})" for t in accepted)
            self._lexers[state] = re.compile(alternation)
        return self._lexers[state]

    def parse(self, text: str, rules):
        """rules: the transformer (a method per rule or alias name, called with the children)."""
        stack, values, pos = [self.start], [], 0
        while True:
            state = stack[-1]
            found = self._lexer(state).match(text, pos) if pos < len(text) else None
            if found is not None and found.lastgroup in self.ignore:
                pos = found.end()
                continue
            if found is None and pos < len(text):
                raise ParseError(f"no token matches at column {pos + 1}: {text[pos:pos + 20]!r}")
            kind, token = (found.lastgroup, found.group()) if found else ("$END", "")
            while True:
                action = self.states[stack[-1]].get(kind)
                if action is None:
                    raise ParseError(f"unexpected {token or 'end of statement'!r} at column "
                                     f"{pos + 1}")
                if action[0] == 0:  # shift
                    stack.append(action[1])
                    values.append((kind, token))
                    break
                rule = action[1]  # reduce
                n = len(rule["expansion"])
                popped = values[len(values) - n:] if n else []
                del values[len(values) - n:]
                del stack[len(stack) - n:]
                value = self._reduce(rule, popped)
                origin = rule["origin"]["name"]
                stack.append(self.states[stack[-1]][origin][1])  # goto (a shift on origin)
                values.append((origin, value))
                if kind == "$END" and stack[-1] == self.end:  # accepted: now the rules
                    return value.value(rules) if isinstance(value, _Node) else value
            pos = found.end() if found else pos

    @staticmethod
    def _reduce(rule, popped):
        children = []
        for symbol, (_, value) in zip(rule["expansion"], popped):
            if symbol.get("filter_out"):
                continue
            if isinstance(value, _Spliced):
                children.extend(value)
            else:
                children.append(value)
        name = rule["origin"]["name"]
        if name.startswith("_"):
            return _Spliced(children)
        if rule["options"]["expand1"] and rule["alias"] is None and len(children) == 1:
            return children[0]
        return _Node(rule["alias"] or name, children)
