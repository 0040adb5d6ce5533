"""Reading and replaying a certificate, one line at a time (spec/format.md).

The file is newline-delimited JSON.  Line n has "id": n and refers only to
lines before it.  Kinds, in order:

  header   format, theorem claimed, strategy, model binding      (line 0)
  weight   one model parameter, exact float32 bytes              (lines 1..12)
  op       a matrix operation on earlier lines, with the recorded
           interval enclosure of its result                       (any number)
  rule     a proof rule from spec/rules.md applied to earlier
           lines, with the count it claims                        (any number)
  dataset  a labelled dataset's text (a dataset theorem only)     (before the rules)
  qed      names the rule line whose count proves the theorem     (last line)

A line is accepted only if the checker's own enclosure lies inside the
recorded one (op), or the rule's side conditions hold (rule).  Later lines use
the recorded values, so each line can be confirmed from the lines it names.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
import time
from dataclasses import dataclass, field
from operator import sub

from . import definitions, ops, rules, statement, tasks
from .arith import MPMATH, Arithmetic
from .errors import Malformed, Rejected
from .limits import Limits
from .modelspec import (
    ATTN_ONLY,
    Dims,
    Family,
    infer_dims,
    matrix_shape,
    parameter_table,
)
from .numbers import decode_bounds, decode_floats
from .tl_config import family_from_tl_config

FORMAT = "maxk-cert"
VERSION = 1
ARITHMETIC = "real-intervals"


DEFAULT_LIMITS = Limits()
_CHUNK = 4096  # elements built between two looks at the clock


class Value:
    """A line's matrix: its term, shape and recorded bounds (row-major floats),
    with its elements in each arithmetic back-end built when first asked for."""

    def __init__(self, term: tuple, lo: tuple, hi: tuple, shape: tuple[int, int]):
        self.term, self.lo, self.hi, self.shape = term, lo, hi, shape
        self._rows: dict[str, list] = {}

    def rows(self, ar: Arithmetic, tick=lambda: None) -> list:
        """The recorded interval matrix as rows of `ar`'s elements (an enclosure), built
        with tick() (the clock) every _CHUNK elements: a back-end element takes microseconds
        to build, and all stored elements together up to a minute."""
        if ar.name not in self._rows:
            items = []
            for start in range(0, len(self.lo), _CHUNK):
                tick()
                items.extend(ar.elements(self.lo[start:start + _CHUNK],
                                         self.hi[start:start + _CHUNK]))
            self._rows[ar.name] = _as_matrix(items, self.shape)
        return self._rows[ar.name]

    @property
    def matrix(self) -> list:
        """Rows of mpmath intervals (the reference back-end)."""
        return self.rows(MPMATH)


class LazyRows:
    """A Value's rows of `ar`'s elements, each row built when first read: the elements
    Value.rows builds (the same constructor on the same recorded pair), for a rule with
    LAZY_INPUTS that reads only some rows on its fast path (rule cubic under its
    accelerator: exp(EQKP) and the diagonal of exp(EQKE)).  Rows already built by
    Value.rows are reused."""

    def __init__(self, value: Value, ar: Arithmetic, tick=lambda: None):
        self._value, self._ar, self._tick = value, ar, tick
        built = value._rows.get(ar.name)
        self._rows = list(built) if built is not None else [None] * value.shape[0]

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> list:
        if type(i) is not int:
            raise TypeError("LazyRows: an integer row index")
        row = self._rows[i]
        if row is None:
            self._tick()
            i %= len(self._rows)
            cols, ar = self._value.shape[1], self._ar
            lo = self._value.lo[i * cols:(i + 1) * cols]
            hi = self._value.hi[i * cols:(i + 1) * cols]
            row = self._rows[i] = [ar.point(a) if a == b else ar.interval(a, b)
                                   for a, b in zip(lo, hi)]
        return row

    def __iter__(self):
        return (self[i] for i in range(len(self._rows)))


@dataclass
class Report:
    """What a successful check established, for the verdict."""

    theorem: str = ""
    facts: statement.Facts | None = None
    strategy: str = ""
    lines: int = 0
    seconds: float = 0.0
    arithmetic: str = MPMATH.name
    float_gap: dict = field(default_factory=dict)  # quantity -> (abs gap, max |value|)
    rule_notes: list = field(default_factory=list)
    # proof length (spec/rules.md §proof length): scalar operations, bytes read,
    # unexplained dimensionality of the rules' black boxes
    work: int = 0
    bytes: int = 0
    dimensionality: int | None = 0  # None once a rule without a definition is used
    family: dict | None = None  # the model family, unless attention-only


def _json_object(text: str, lineno: int) -> dict:
    """Parse one line strictly: no NaN/Infinity, no duplicate keys."""

    def no_constants(name):
        raise Malformed(f"line {lineno}: non-finite number {name} in JSON")

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise Malformed(f"line {lineno}: duplicate key in JSON object")
        return dict(pairs)

    try:
        obj = json.loads(text, parse_constant=no_constants, object_pairs_hook=no_duplicates)
    except Malformed:
        raise
    except (ValueError, RecursionError) as err:
        raise Malformed(f"line {lineno}: not valid JSON ({str(err)[:80]})") from None
    if not isinstance(obj, dict):
        raise Malformed(f"line {lineno}: expected a JSON object")
    return obj


def _keys(obj: dict, lineno: int, required: set, optional: set = frozenset()) -> None:
    missing = required - obj.keys()
    extra = obj.keys() - required - optional
    if missing:
        raise Malformed(f"line {lineno}: missing field(s) {sorted(missing)}")
    if extra:
        raise Malformed(f"line {lineno}: unknown field(s) {sorted(extra)}")


def _int(x: object, what: str, low: int = 0, high: int = 1 << 40) -> int:
    if type(x) is not int or not low <= x <= high:
        raise Malformed(f"{what}: expected an integer in [{low}, {high}], got {x!r}"[:200])
    return x


def _shape(x: object, what: str, limits: Limits) -> tuple[int, int]:
    if not (isinstance(x, list) and len(x) == 2):
        raise Malformed(f"{what}: shape must be [rows, columns]")
    r, c = _int(x[0], what, 1), _int(x[1], what, 1)
    if r * c > limits.max_elements:
        raise Malformed(f"{what}: {r}x{c} matrix exceeds the limit of {limits.max_elements} "
                        "elements")
    return (r, c)


def _as_matrix(values, shape) -> list:
    r, c = shape
    return [list(values[i * c:(i + 1) * c]) for i in range(r)]


class CertificateChecker:
    """Replays a certificate line by line.  Use: feed(line) for each line, then
    finish() -> Report.  Raises Malformed or Rejected on the first problem."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS, model_file=None, jobs: int = 1,
                 arith: Arithmetic = MPMATH, distance: bool = False):
        self.limits = limits
        # a real certificate's costlier distance-to-float32 notes (--float32-distance): the
        # compact rules' smallest margins and Lemma G's δ (spec/rules.md §distance to float32)
        self.distance = distance
        self.arith = arith  # the arithmetic back-end (checker/arith)
        self.jobs = jobs  # processes a rule may use
        self.model_file = model_file  # checker.modelfile.ModelFile or None
        self.values: dict[int, Value] = {}
        self.proven: dict[int, int] = {}
        self.header: dict | None = None
        self.weights: dict[str, tuple] = {}  # name -> (tl shape, values)
        self.dims: Dims | None = None
        self.family: Family = ATTN_ONLY  # from the header's optional "family"
        self.weights_sha256 = ""
        self.canonical: dict = {}
        self.work = 0
        self.stored = 0  # elements of self.values, charged before they are decoded
        self.next_id = 0
        self.task_claim: tuple | None = None  # (task name, {param: value}) of the theorem
        self.task: tasks.Task | None = None  # built once the dimensions are known
        self.dataset_text: str | None = None
        self.read = 0  # lines fed, blank ones included (--max-lines)
        self.done = False
        self.started = time.monotonic()
        # called from charge() at most every 0.1 s (check_file: the progress line's
        # heartbeat on a terminal); it draws, and reads and decides nothing
        self.heartbeat, self.next_beat = None, 0.0
        self.report = Report(arithmetic=arith.name)
        self.semantics = "real"  # the header theorem's semantics (spec/theorem.md §2c)

    # -- driving ---------------------------------------------------------
    def feed(self, text: str) -> None:
        self.read += 1  # every line read counts, blank or not: a stream of newlines ends too
        if self.read > self.limits.max_lines:
            raise Malformed(f"more than {self.limits.max_lines} lines")
        if not text.strip():  # a blank line is no certificate line, but it takes time
            self.charge(0)
            return
        lineno = self.next_id
        if self.done:
            raise Malformed(f"line {lineno}: data after the qed line")
        try:
            obj = _json_object(text, lineno)
        except Malformed as err:  # a last line without its newline: the file was cut short
            cut = "" if text.endswith("\n") else "; the file ends inside this line (truncated?)"
            raise Malformed(f"{err}{cut}") from None
        if obj.get("id") != lineno or type(obj.get("id")) is not int:
            raise Malformed(f"line {lineno}: has id {obj.get('id')!r}; ids must be 0, 1, 2, ... "
                            "in order (a line dropped, duplicated or reordered?)")
        kind = obj.get("kind")
        n_weights = len(parameter_table(self.family))
        if lineno == 0:
            expected = ("header",)
        elif lineno <= n_weights:
            expected = ("weight",)
        else:
            expected = ("op", "rule", "qed", "dataset")
        if kind not in expected:
            raise Malformed(f"line {lineno}: kind {kind!r} where {' or '.join(expected)} "
                            "is expected")
        getattr(self, "_" + kind)(obj, lineno)
        self.report.bytes += len(text.encode("utf-8"))
        self.next_id += 1
        self.charge(0)

    def charge(self, work: int) -> None:
        """Account for `work` scalar operations; enforce the work and time limits."""
        self.work += work
        if self.work > self.limits.max_work:
            raise Malformed(f"certificate needs more than {self.limits.max_work} interval "
                            "operations (raise --max-work to allow it)")
        now = time.monotonic()
        if now - self.started > self.limits.max_seconds:
            raise Malformed(f"checking took longer than {self.limits.max_seconds} s "
                            "(raise --max-seconds to allow it)")
        if self.heartbeat is not None and now >= self.next_beat:  # a terminal's progress line
            self.next_beat = now + 0.1
            self.heartbeat()

    def tick(self) -> None:
        """The clock alone (the time limit), for loops that do no counted work."""
        self.charge(0)

    def store(self, count: int, what: str) -> None:
        """Account for `count` elements about to be kept in memory, before they are decoded
        or built (the memory limit): a line's recorded matrix, kept to the end, or a rule's
        table, kept until its rule line is done (RuleBudget).  `what` names them."""
        self.stored += count
        if self.stored > self.limits.max_stored_elements:
            raise Malformed(f"{what} hold more than {self.limits.max_stored_elements} "
                            "elements in all (raise --max-stored-elements to allow it)")

    def finish(self) -> Report:
        if not self.done:
            raise Malformed(f"certificate ends after {self.next_id} lines without a qed line "
                            "(truncated?)")
        self.report.lines = self.next_id
        self.report.work = self.work
        self.report.seconds = time.monotonic() - self.started
        return self.report

    # -- line kinds ------------------------------------------------------
    def _header(self, obj: dict, lineno: int) -> None:
        _keys(obj, lineno, {"id", "kind", "format", "version", "arithmetic", "theorem",
                            "strategy", "model"}, {"generator", "family"})
        if obj["format"] != FORMAT or type(obj["version"]) is not int or obj["version"] != VERSION:
            raise Malformed(f"unsupported format {obj['format']!r} version {obj['version']!r}; "
                            f"this checker reads {FORMAT} version {VERSION}")
        if obj["arithmetic"] != ARITHMETIC:
            raise Malformed(f"unsupported arithmetic {obj['arithmetic']!r}")
        if not isinstance(obj["strategy"], str) or not isinstance(obj["model"], dict):
            raise Malformed("header: strategy must be a string and model an object")
        claimed = statement.parse(obj["theorem"], "header theorem")
        fields = {a.field for a in claimed}
        needed = {"task", "d_vocab", "n_ctx", "d_model", "d_head", "weights", "correct"}
        if "property" in fields:  # the required fields depend on the property (statements.md)
            needed = _needed_fields(claimed, fields)
        if not needed <= fields:
            raise Malformed(f"header theorem must state {sorted(needed - fields)}")
        if "task" in fields:
            self.task_claim = (next(a.value for a in claimed if a.field == "task"),
                               {a.field: a.value for a in claimed
                                if a.field in tasks.PARAM_FIELDS})
        self.semantics = next((a.value for a in claimed if a.field == "semantics"), "real")
        if "family" in obj:  # absent: the attention-only family of format version 1
            self.family = Family.from_json(obj["family"])
        self.header = obj
        self.report.strategy = obj["strategy"]

    def _weight(self, obj: dict, lineno: int) -> None:
        _keys(obj, lineno, {"id", "kind", "name", "shape", "dtype", "data"})
        param = parameter_table(self.family)[lineno - 1]
        name = param.key
        if obj["name"] != name:
            raise Malformed(f"line {lineno}: weight {obj['name']!r} where {name!r} is expected "
                            "(weights come in the order of spec/format.md)")
        tl_shape = obj["shape"]
        if not (isinstance(tl_shape, list) and 1 <= len(tl_shape) <= 3):
            raise Malformed(f"line {lineno}: bad shape {tl_shape!r}")
        tl_shape = tuple(_int(n, f"line {lineno}: shape", 1, self.limits.max_elements)
                         for n in tl_shape)
        count = math.prod(tl_shape)
        if count > self.limits.max_elements:
            raise Malformed(f"line {lineno}: {name} has {count} elements, over the limit")
        if obj["dtype"] != "f32":
            raise Malformed(f"line {lineno}: weights must be f32, not {obj['dtype']!r}")
        self.store(count, f"line {lineno}: the certificate's matrices")
        values = decode_floats(obj["data"], count, "f32", f"line {lineno} ({name})")
        self.weights[name] = (tl_shape, values)
        mshape = matrix_shape(tl_shape)
        self.values[lineno] = Value(definitions.W(param.short), values, values, mshape)
        if lineno == len(parameter_table(self.family)):
            self._bind_weights()

    def _bind_weights(self) -> None:
        """All weights read: infer dimensions, hash them, compare with --model."""
        self.dims = infer_dims({n: s for n, (s, _) in self.weights.items()}, self.family)
        self.canonical = definitions.model_terms(self.dims)
        self.weights_sha256 = weights_digest(self.dims, self.weights)
        if self.task_claim is not None and self.task_claim[0] != "dataset":
            self.task = tasks.make_task(*self.task_claim, self.dims.d_vocab, self.dims.n_ctx)
        if self.model_file is not None:
            note = check_against_model_file(self.weights, self.model_file, self.dims)
            if note:
                self.report.rule_notes.append(note)

    def _op(self, obj: dict, lineno: int) -> None:
        _keys(obj, lineno, {"id", "kind", "op", "args", "shape", "lo", "hi"},
              {"params", "float"})
        op = obj["op"]
        if not isinstance(op, str) or op not in ops.OPS:
            raise Malformed(f"line {lineno}: unknown op {op!r}")
        function, arity, param_names = ops.OPS[op]
        args = self._refs(obj["args"], lineno, arity)
        params = obj.get("params", {})
        if not isinstance(params, dict) or set(params) != set(param_names):
            raise Malformed(f"line {lineno}: op {op} takes params {list(param_names)}")
        for p in param_names:
            _int(params[p], f"line {lineno}: param {p}", 0, 1 << 20)
        shape = ops.result_shape(op, [a.shape for a in args], params)
        if _shape(obj["shape"], f"line {lineno}", self.limits) != shape:
            raise Malformed(f"line {lineno}: recorded shape {obj['shape']} but {op} gives "
                            f"{list(shape)}")
        count = shape[0] * shape[1]
        self.store(count, f"line {lineno}: the certificate's matrices")
        lo, hi = decode_bounds(obj["lo"], obj["hi"], count, f"line {lineno}")
        self.charge(count * ops.COST.get(op, 1) * (args[0].shape[1] if op == "matmul" else
                                                   args[0].shape[0] if op == "mean_rows" else 1))
        # ops call tick() at least once per result row: the time limit holds inside a line too
        tick = self.tick
        values = [params[p] for p in param_names]
        if op in ops.EXACT:  # entries only move: compare the recorded floats themselves
            ar = _RECORDED
            computed = function(*[_as_matrix(list(zip(a.lo, a.hi)), a.shape) for a in args],
                                *values, tick=tick)
        else:
            ar = self.arith if op in ops.PORTABLE else MPMATH
            kwargs = {"ar": ar} if op in ops.PORTABLE else {}
            computed = function(*[a.rows(ar, tick) for a in args], *values, tick=tick,
                                **kwargs)
        flat = [x for row in computed for x in row]
        contained = ar.contained
        for start in range(0, len(flat), _CHUNK):  # a chunk at a time, the clock before each
            tick()
            end = start + _CHUNK
            if all(map(contained, flat[start:end], lo[start:end], hi[start:end])):
                continue
            i = next(i for i in range(start, min(end, len(flat)))  # the first one not enclosed
                     if not contained(flat[i], lo[i], hi[i]))
            r, c = divmod(i, shape[1])
            raise Rejected(f"line {lineno} ({op}): recorded interval at [{r}, {c}] "
                           f"[{lo[i]!r}, {hi[i]!r}] does not enclose the checker's "
                           f"{_show(ar, flat[i])}")
        term = (op, *[a.term for a in args], *[params[p] for p in param_names])
        self.values[lineno] = Value(term, lo, hi, shape)
        if "float" in obj and term in self.canonical.values():
            self._measure_gap(obj["float"], lo, hi, term, lineno)

    def _measure_gap(self, data, lo, hi, term, lineno) -> None:
        """The generator's plain float32 result vs the enclosure (report only)."""
        floats = decode_floats(data, len(lo), "f32", f"line {lineno} (float)")
        gap = max(max(map(abs, map(sub, floats, lo))), max(map(abs, map(sub, floats, hi))))
        scale = max(map(abs, floats))
        for name, t in self.canonical.items():
            if t == term:
                self.report.float_gap[name] = (gap, scale)

    def _refs(self, refs: object, lineno: int, arity: int) -> list[Value]:
        if not (isinstance(refs, list) and len(refs) == arity):
            raise Malformed(f"line {lineno}: expected {arity} argument line id(s)")
        out = []
        for r in refs:
            _int(r, f"line {lineno}: argument", 0, lineno - 1)
            if r not in self.values:
                raise Malformed(f"line {lineno}: argument {r} is not a matrix line")
            out.append(self.values[r])
        return out

    def _dataset(self, obj: dict, lineno: int) -> None:
        """The labelled dataset a `task == dataset` theorem names by its SHA-256
        (spec/format.md §dataset): once, before any rule line."""
        _keys(obj, lineno, {"id", "kind", "text"})
        if self.task_claim is None or self.task_claim[0] != "dataset":
            raise Malformed(f"line {lineno}: a dataset line, but the theorem's task is not "
                            "dataset")
        if self.dataset_text is not None or self.proven:
            raise Malformed(f"line {lineno}: one dataset line, before every rule line")
        if not isinstance(obj["text"], str):
            raise Malformed(f"line {lineno}: the dataset text must be a string")
        self.store(len(obj["text"]) // 8, f"line {lineno}: the dataset")
        self.dataset_text = obj["text"]
        self.task = tasks.make_task(*self.task_claim, self.dims.d_vocab, self.dims.n_ctx,
                                    obj["text"])

    def _rule(self, obj: dict, lineno: int) -> None:
        _keys(obj, lineno, {"id", "kind", "rule", "inputs", "claim"}, {"hints"})
        if not isinstance(obj["rule"], str) or obj["rule"] not in rules.RULES:
            raise Malformed(f"line {lineno}: unknown rule {obj['rule']!r}; "
                            f"known: {', '.join(sorted(rules.RULES))}")
        rule = rules.RULES[obj["rule"]]
        if self.semantics not in getattr(rule, "SEMANTICS", ("real",)):  # fail closed
            raise Rejected(f"line {lineno}: rule {obj['rule']} proves the real semantics only; "
                           f"this theorem claims semantics == {self.semantics} (spec/theorem.md "
                           "§2c; rule forward_brute_force proves it)")
        if getattr(rule, "PROPERTY", "accuracy") == "overwhelm":
            if not (self.dims.family.is_attn_only or getattr(rule, "ANY_FAMILY", False)):
                raise Rejected(f"line {lineno}: rule {obj['rule']} applies only to the "
                               "attention-only model family (spec/theorem.md §1b)")
            return self._overwhelm_rule(obj, lineno, rule)
        task = self.scored_task(lineno)
        any_task = getattr(rule, "ANY_TASK", False)
        if task.name != "max_of_k" and not any_task:
            raise Rejected(f"line {lineno}: rule {obj['rule']} proves max_of_k accuracy only; "
                           f"this theorem's task is {task.name} (rule forward_brute_force "
                           "certifies any task: spec/rules.md)")
        hints = obj.get("hints")
        names = rule.inputs(self.dims, hints) if hasattr(rule, "inputs") else rule.INPUTS
        # rules that prove float32 on EU widened by Lemma G's δ (spec/rules.md §float32 by
        # widening EU) run unchanged on that wider enclosure
        widen = self.semantics == "float32" and getattr(rule, "FLOAT32_WIDENS_EU", False)
        if self.semantics != "real":  # e.g. the weights, for brute_force's δ (theorem.md §2c)
            names = (*names, *getattr(rule, "FLOAT32_INPUTS", ()))
        inputs = obj["inputs"]
        if not isinstance(inputs, dict) or set(inputs) != set(names):
            raise Malformed(f"line {lineno}: rule {obj['rule']} takes inputs {list(names)}")
        missing = [n for n in names if n not in self.canonical]
        if missing:
            raise Rejected(f"line {lineno}: rule {obj['rule']} needs {', '.join(missing)}, "
                           "which this model family does not define (spec/theorem.md)")
        # a rule written against checker/arith lists the back-ends it supports
        # (ARITHMETICS); any other rule runs in mpmath whatever is selected
        portable = self.arith.name in getattr(rule, "ARITHMETICS", ())
        # the float32 semantics is evaluated in mpmath only (spec/theorem.md §2c)
        # (the rules widening EU run in the selected back-end: δ is exact rationals)
        ar = self.arith if portable and (self.semantics == "real" or widen) else MPMATH
        # a rule whose inputs are mpmath intervals whatever the back-end (INPUT_ARITHMETIC)
        rows_ar = MPMATH if getattr(rule, "INPUT_ARITHMETIC", None) == "mpmath" else ar
        values = {}
        for name in names:
            (value,) = self._refs([inputs[name]], lineno, 1)
            if value.term != self.canonical[name]:
                raise Rejected(f"line {lineno}: input {name} (line {inputs[name]}) is not "
                               f"{name} as defined in spec/theorem.md")
            values[name] = value
        # subcubic_gap's low-rank EU ("eu" hints) reads no EU but W_U, b_U: they stay inputs
        low_rank = widen and "EU" not in values
        weights = _float32_weights(rule, dict(values) if low_rank else values) if widen else {}
        # a rule reading only some rows of its inputs has them built on first read
        lazy = getattr(rule, "LAZY_INPUTS", False)
        matrices = {name: LazyRows(value, rows_ar, self.tick) if lazy
                    else value.rows(rows_ar, self.tick) for name, value in values.items()}
        widened = ""
        if low_rank:  # the rule raises its tables U, N by δ itself (spec/rules.md §low-rank EU)
            if not getattr(rule, "FLOAT32_RAISES_TABLES", False):  # fail closed
                raise Rejected(f"line {lineno}: rule {obj['rule']} reads no EU to widen")
        elif widen:
            from . import float32  # only for a float32 theorem (spec/trust.md)

            # subcubic_gap's summary row is the mean of EU before widening (spec/rules.md)
            matrices["EU_UNWIDENED"] = matrices["EU"]
            widened = self._widen_float32(
                lineno, obj["rule"], values, ("EU",), float32.delta_work(self.dims),
                lambda: lambda _, eu: float32.widened_eu(self.dims, weights, eu.lo, eu.hi,
                                                         ar.int_matmul),
                "EU widened by Lemma G's δ[q][o]")
            matrices["EU"] = values["EU"].rows(ar, self.tick)
        claim = _int(obj["claim"], f"line {lineno}: claim", 0, task.pairs())
        started, stored = time.monotonic(), self.stored
        budget = RuleBudget(self, lineno, obj["rule"])
        extra = {"arith": ar} if portable else {}
        if getattr(rule, "RECORDED", False):  # the recorded binary64 pairs themselves
            extra["recorded"] = {name: self._recorded_rows(value)
                                 for name, value in values.items()}
        if any_task:
            extra["task"] = task
        if self.semantics != "real" and not widen:
            extra["semantics"] = self.semantics
        if low_rank:  # the weights for δ, read by the rule's own widening
            extra["float32_weights"] = weights
        if self.semantics == "real" and self.distance and getattr(rule, "NOTE_WEIGHTS", False):
            extra["note_weights"] = lambda: self._note_weights(rule.FLOAT32_INPUTS)
        proven, note = rule.check(self.dims, matrices, hints, budget, self.jobs, **extra)
        note += widened
        self.stored = stored  # the rule's tables are garbage now
        if self.semantics != "real" and ar is not self.arith:  # float32 under --arith arb
            note += f"; evaluated with {ar.name}, the float32 passes are {ar.name}-only"
        note += f" ({time.monotonic() - started:.1f} s)"
        if proven < claim:
            raise Rejected(f"line {lineno}: rule {obj['rule']} proves {proven} correct "
                           f"sequences, but the line claims {claim}")
        self.proven[lineno] = claim
        if hasattr(rule, "dimensionality") and self.report.dimensionality is not None:
            self.report.dimensionality += rule.dimensionality(self.dims, hints)
        else:  # the rule defines none (spec/rules.md §proof length): the sum is undefined
            self.report.dimensionality = None
        self.report.rule_notes.append(f"{obj['rule']}: {note}")

    def _note_weights(self, names) -> dict | None:
        """The weights {name: rows} for a real certificate's distance-to-float32 note
        (Lemma G's δ; spec/rules.md §distance to float32): the weight lines found by their
        canonical term, not inputs of the rule line, read by no verdict; None if one is absent
        or has width (the note then names δ unavailable)."""
        found = [next((x for x in self.values.values() if x.term == self.canonical.get(n)),
                      None) for n in names]
        if any(x is None or x.lo != x.hi for x in found):
            return None
        return {n: _weight_rows(x) for n, x in zip(names, found)}

    def _recorded_rows(self, value: Value) -> list:
        """The recorded interval matrix as rows of (lo, hi) binary64 pairs (exact)."""
        self.tick()
        return _as_matrix(list(zip(value.lo, value.hi)), value.shape)

    def scored_task(self, lineno: int) -> tasks.Task:
        """The task the accuracy theorem scores (max_of_k when the header names none)."""
        if self.task is not None:
            return self.task
        if self.task_claim is not None:  # a dataset theorem before its dataset line
            raise Malformed(f"line {lineno}: the theorem's task is dataset, but no dataset "
                            "line precedes this rule line")
        return tasks.max_of_k(self.dims.d_vocab, self.dims.n_ctx)

    def _overwhelm_rule(self, obj: dict, lineno: int, rule) -> None:
        """A rule proving an overwhelm claim (spec/overwhelm.md): its inputs are
        the terms `rule.inputs` names for the claim (per query position)."""
        claim = rule.parse_claim(obj["claim"], self.dims, rule.FORM)
        wanted = rule.inputs(self.dims, claim)
        # float32 (spec/rules.md §float32 for the overwhelm rules): every EU_Q@p widened by
        # Lemma G@p's δ_p[q][o], from the weights (read for δ only, never by the rule)
        # (a rule without FLOAT32_WIDENS_EU but with float32 in SEMANTICS, overwhelm_family,
        # proves it itself: spec/rules.md §overwhelm_family, float32)
        widen = self.semantics == "float32" and getattr(rule, "FLOAT32_WIDENS_EU", False)
        if self.semantics not in getattr(rule, "SEMANTICS", ("real",)):  # fail closed
            raise Rejected(f"line {lineno}: rule {obj['rule']} proves the real semantics "
                           "only (spec/theorem.md §2c)")
        if widen:
            wanted = {**wanted, **{name: self.canonical[name] for name in rule.FLOAT32_INPUTS}}
        if not isinstance(obj["inputs"], dict) or set(obj["inputs"]) != set(wanted):
            raise Malformed(f"line {lineno}: rule {obj['rule']} for this claim takes inputs "
                            f"{sorted(wanted)}"[:300])
        ar = self.arith if self.arith.name in getattr(rule, "ARITHMETICS", ()) else MPMATH
        # a rule may read its inputs as mpmath intervals whatever the back-end (it converts
        # what it computes with `ar` itself: overwhelm_family)
        rows_ar = MPMATH if getattr(rule, "INPUT_ARITHMETIC", None) == "mpmath" else ar
        values = {}
        for name, term in wanted.items():
            (value,) = self._refs([obj["inputs"][name]], lineno, 1)
            if value.term != term:
                raise Rejected(f"line {lineno}: input {name} (line {obj['inputs'][name]}) is "
                               "not that quantity as defined in spec/overwhelm.md")
            values[name] = value
        widened = ""
        if widen:
            from . import float32  # only for a float32 theorem (spec/trust.md)

            weights = _float32_weights(rule, values)
            eus = {n: int(n.split("@")[1]) for n in values if n.startswith("EU_Q@")}

            def by_rows():  # δ_p for the claim's query row only, the key tables shared
                rows = float32.attention_only_delta_rows(self.dims, weights, claim.query,
                                                         eus.values(), ar.int_matmul)
                return lambda name, eu: float32.widened_eu_row(
                    self.dims, weights, eu.lo, eu.hi, claim.query, eus[name],
                    row=rows[eus[name]])

            widened = self._widen_float32(
                lineno, obj["rule"], values, tuple(eus),
                float32.delta_row_work(self.dims, len(eus)), by_rows,
                "EU_Q@p widened by Lemma G@p's δ_p[q][o]")
        matrices = {name: value.rows(rows_ar, self.tick) for name, value in values.items()}
        started, stored = time.monotonic(), self.stored
        extra = {"semantics": self.semantics} if self.semantics != "real" and not widen else {}
        if self.semantics == "real" and self.distance and getattr(rule, "FLOAT32_WIDENS_EU",
                                                                  False):
            # the note's δ_p (spec/rules.md §distance to float32): not inputs, never decide
            extra["note_weights"] = _note_weights_overwhelm(self.values, self.canonical, rule)
        if self.semantics == "real" and self.distance and getattr(rule, "NOTE_DISTANCE", False):
            extra["distance"] = True  # the note's costlier part (spec/rules.md §distance)
        note = rule.check(self.dims, matrices, claim, obj.get("hints"),
                          RuleBudget(self, lineno, obj["rule"]), arith=ar, **extra) + widened
        self.stored = stored  # the rule's tables are garbage now
        self.proven[lineno] = claim
        self.report.rule_notes.append(f"{obj['rule']}: {note} "
                                      f"({time.monotonic() - started:.1f} s)")

    def _widen_float32(self, lineno: int, rule_name: str, values: dict, names, work: int,
                       prepare, what: str) -> str:
        """The float32 widening of both EU paths (spec/rules.md §float32 by widening EU,
        §float32 for the overwhelm rules): charge `work` (δ's own operations) and the two
        widened ends of every entry of values[name], name in names, to the rule line's
        budget; then widen = prepare() (δ computed after the charge) and each such
        enclosure becomes widen(name, value) = ([lo − δ, hi + δ] rounded outward, max δ)
        (float32.widened_eu / widened_eu_row).  Returns the rule note's text."""
        RuleBudget(self, lineno, rule_name)(work + sum(2 * len(values[n].lo) for n in names))
        worst, widen = 0.0, prepare()
        for name in names:
            eu = values[name]
            lo, hi, top = widen(name, eu)
            values[name] = Value(eu.term, lo, hi, eu.shape)
            worst = max(worst, top)
        return f" (float32 semantics: {what} ≤ {float(worst):.3g})"

    def _qed(self, obj: dict, lineno: int) -> None:
        _keys(obj, lineno, {"id", "kind", "by"})
        by = _int(obj["by"], f"line {lineno}: by", 0, lineno - 1)
        if by not in self.proven:
            raise Malformed(f"line {lineno}: qed names line {by}, which is not a rule line")
        d = self.dims
        proven = self.proven[by]
        overwhelm = proven if isinstance(proven, statement.Overwhelm) else None
        facts = statement.Facts(
            dims={"d_vocab": d.d_vocab, "n_ctx": d.n_ctx, "d_model": d.d_model,
                  "d_head": d.d_head},
            weights_sha256=self.weights_sha256, correct=None if overwhelm else proven,
            model_file_sha256=self.model_file.sha256 if self.model_file else None,
            overwhelm=overwhelm, task=None if overwhelm else self.scored_task(lineno),
            semantics=self.semantics)
        for atom in statement.parse(self.header["theorem"], "header theorem"):
            if not statement.holds(atom, facts):
                raise Rejected(f"the certificate claims '{atom}', which was not verified "
                               f"(verified: {statement.theorem_text(facts)})")
        self.report.family = None if self.family.is_attn_only else self.family.to_json()
        self.report.theorem = self.header["theorem"]
        self.report.facts = facts
        self.done = True


class RuleBudget:
    """What one rule line may spend, passed to its rule as `charge`: charge(work) charges
    scalar operations and checks the clock (CertificateChecker.charge), as a plain function
    would; `hold` charges the elements of a table the rule is about to build to the memory
    limit, through the same CertificateChecker.store as the recorded matrices.  The rule's
    tables are released when it returns."""

    def __init__(self, checker: CertificateChecker, lineno: int, rule: str):
        self.checker, self.lineno, self.rule = checker, lineno, rule

    def __call__(self, work: int) -> None:
        self.checker.charge(work)

    def hold(self, count: int, what: str) -> None:
        self.checker.store(count, f"line {self.lineno}: rule {self.rule}'s {what} "
                                  f"({count} elements) and the certificate's matrices")


def hold(charge, count: int, what: str) -> None:
    """Charge `count` elements of `what`, a table a rule is about to build, to the memory
    limit (--max-stored-elements) BEFORE the rule builds it, and check the clock.  Rules
    call this with the `charge` they were given: the checker's RuleBudget (or a wrapper
    with a `hold` that passes it on).  A bare function (a test calling a rule directly)
    has no memory limit."""
    limit = getattr(charge, "hold", None)
    if limit is not None:
        limit(count, what)
    charge(0)


def _needed_fields(claimed: list, fields: set) -> set:
    """Header fields a theorem with a `property` atom must state."""
    prop = next(a.value for a in claimed if a.field == "property")
    common = {"property", "d_vocab", "n_ctx", "d_model", "d_head", "weights"}
    if prop == "accuracy":
        return common | {"task", "correct"}
    if len({"free", "free_perm"} & fields) != 1:
        raise Malformed("an overwhelm theorem states exactly one of 'free' and 'free_perm'")
    return common | {"prefix", "query", "output"}


class _RecordedPairs:
    """Containment for ops that only move entries: an entry is its recorded
    (lo, hi) pair of floats, compared exactly."""

    @staticmethod
    def contained(x, lo, hi):
        return lo <= x[0] and x[1] <= hi

    @staticmethod
    def float_bounds(x):
        return x


_RECORDED = _RecordedPairs()


def _show(ar, x) -> str:
    lo, hi = ar.float_bounds(x)
    return f"[{lo!r}, {hi!r}] (approximately)"


def weights_digest(dims: Dims, weights: dict) -> str:
    """SHA-256 binding a theorem to exact weights (spec/format.md §weights).

    Hashes a version tag with the dimensions (and, for any family but the
    attention-only one, the family as canonical JSON), then every parameter's
    float32 values, little-endian, in the order of modelspec.parameter_table.
    """
    h = hashlib.sha256()
    sizes = f"{dims.d_vocab} {dims.n_ctx} {dims.d_model} {dims.d_head}"
    if dims.family.is_attn_only:
        h.update(f"maxk-weights-v1 {sizes}\n".encode())
    else:
        family = json.dumps(dims.family.to_json(), sort_keys=True, separators=(",", ":"))
        h.update(f"maxk-weights-v2 {sizes} {family}\n".encode())
    for param in parameter_table(dims.family):
        values = weights[param.key][1]
        h.update(struct.pack(f"<{len(values)}f", *values))
    return h.hexdigest()


def check_against_model_file(weights: dict, model_file, dims: Dims) -> str | None:
    """The certificate's weights must be exactly the model file's tensors, and
    its family the one the file's config describes (a file without a config,
    or whose config is the attention-only class, is attention-only).

    Parameters absent from the file (biases a model was trained without)
    must be zero in the certificate.  The certified sequence length dims.n_ctx may be
    below the model's position capacity P (spec/theorem.md §1): a learned table then
    binds by its first n_ctx rows, the only ones a sequence of that length reads.
    Returns a note for the report when n_ctx < P.
    """
    tensors = model_file.tensors
    config = getattr(model_file, "config", None)
    shapes = {n: tuple(t.shape) for n, t in tensors.items()}
    family = dims.family
    file_family = ATTN_ONLY if config is None else family_from_tl_config(config, shapes,
                                                                         dims.n_ctx)
    if file_family != family:
        raise Rejected(_family_mismatch(family, file_family, config is None))
    capacity = (infer_dims(shapes, family).n_ctx if family.positional == "standard"
                else config["n_ctx"])
    if dims.n_ctx > capacity:
        raise Rejected(f"the certificate's sequences have length {dims.n_ctx}, more than the "
                       f"model's n_ctx = {capacity}")
    for name, (shape, values) in weights.items():
        if name not in tensors:
            if any(v != 0 for v in values):
                raise Rejected(f"{name} is absent from the model file but non-zero in the "
                               "certificate")
            continue
        t = tensors[name]
        if t.dtype != "float32":
            raise Rejected(f"the model file's {name} is {t.dtype}, not float32, so it cannot be "
                           "the certificate's float32 weights bit for bit (save the model in "
                           "float32)")
        file_shape, file_values = tuple(t.shape), t.values
        if name == "pos_embed.W_pos" and file_shape[0] > dims.n_ctx:  # rows 0..n_ctx-1
            file_shape = (dims.n_ctx, *file_shape[1:])
            file_values = file_values[:dims.n_ctx * math.prod(file_shape[1:])]
        if file_shape != tuple(shape) or _float32_bits(file_values) != _float32_bits(values):
            raise Rejected(f"the certificate's {name} differs from the model file's")
    if dims.n_ctx < capacity:
        return (f"sequences of length n_ctx = {dims.n_ctx}; the model file's position "
                f"capacity is {capacity} (positions {dims.n_ctx}..{capacity - 1} unused)")
    return None


def _family_mismatch(family: Family, file_family: Family, no_config: bool) -> str:
    """Why the certificate's family is not the file's, naming only what differs."""
    ours, theirs = family.all_fields(), file_family.all_fields()
    diff = ", ".join(f"{k} {ours[k]!r} (the file's: {theirs[k]!r})" for k in ours
                     if ours[k] != theirs[k])
    if no_config:
        return (f"the model file has no config, so it is read as the attention-only model; the "
                f"certificate's model differs: {diff}. Save the config with the weights "
                "({'model': model.state_dict(), 'config': model.cfg.to_dict()}) or put "
                "<stem>.config.json beside the file")
    return f"the certificate's model family is not the model file's: {diff}"


def _float32_weights(rule, values: dict) -> dict:
    """Remove the rule's FLOAT32_INPUTS (the weights, read for Lemma G's δ only, never by
    the rule) from values and return them as _weight_rows."""
    return {name: _weight_rows(values.pop(name)) for name in rule.FLOAT32_INPUTS
            if name in values}


def _note_weights_overwhelm(values: dict, canonical: dict, rule) -> dict:
    """A real overwhelm line's note only (spec/rules.md §distance to float32): the weights
    FLOAT32_INPUTS names, each from the line whose term is its canonical one (the values a
    float32 line would bind), as _weight_rows; {} if one is absent or has width."""
    wanted = {canonical.get(name): name for name in rule.FLOAT32_INPUTS}
    found = {wanted[v.term]: v for v in values.values() if v.term[0] == "param"
             and v.term in wanted and v.lo == v.hi}
    return ({name: _weight_rows(v) for name, v in found.items()}
            if len(found) == len(rule.FLOAT32_INPUTS) else {})


def _weight_rows(value: Value) -> list:
    """A weight line's entries for float32's Lemma G: its recorded binary64 values as rows
    (a weight line is one exact float32 per entry), or, if any entry has width, its mpmath
    rows (which Lemma G refuses)."""
    if value.lo != value.hi:
        return value.matrix
    cols = value.shape[1]
    return [list(value.lo[i:i + cols]) for i in range(0, len(value.lo), cols)]


def _float32_bits(values) -> bytes:
    """The binary32 encodings of float32 values (exact: each is a float32), so that the
    comparison is bit for bit (−0.0 and +0.0 differ)."""
    return struct.pack(f"<{len(values)}f", *values)
