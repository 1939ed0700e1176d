"""adcore's model of one LLVM function, read from llvmlite's parsed module.

The differentiator works on this model: blocks in order, instructions with their
opcode, result type, typed operands (each pointing at its defining instruction or
argument, or holding constant text), phi incoming blocks and terminator successors.
Every value is named (the cleanup pipeline runs instnamer), so an instruction's text
can be copied and rewritten by renaming ``%name`` tokens.

The attributes LLVM spells only in an instruction's text (llvmlite gives no accessor for
them) are parsed here, once, into fields of :class:`Instr`: ``predicate`` (icmp, fcmp),
``flags`` (nsw, nuw, exact, disjoint, nneg, samesign, inbounds, nusw and the fast-math
flags), ``element_type`` (a getelementptr's source element type), ``allocated_type`` (an
alloca's), ``align``, ``volatile`` and ``atomic`` (memory instructions).  Nothing else
reads them from the text.
"""
import re

from ..numba_abi import untimed_llvm_calls

_IDENT = re.compile(r"^[-a-zA-Z$._][-a-zA-Z$._0-9]*$")
_LOCAL = re.compile(r'%(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)')
_METADATA = re.compile(r",\s*!dbg\s+![0-9]+")
_ATTACHED_METADATA = re.compile(r",\s*![-a-zA-Z_.0-9]+\s+!(?:[0-9]+|\{[^}]*\})")
_DBG = re.compile(r"!dbg\s+!([0-9]+)")
FLOAT_TYPES = ("double", "float")
_VECTOR = re.compile(r"^<\s*([0-9]+)\s*x\s*(double|float)\s*>$")


def is_float_type(type_):
    """Scalar floats and vectors of floats (what loop vectorisers emit)."""
    return type_ in FLOAT_TYPES or bool(_VECTOR.match(type_))


def vector_shape(type_):
    """``(lanes, element type)`` of a float vector type, or None for a scalar."""
    m = _VECTOR.match(type_)
    return (int(m.group(1)), m.group(2)) if m else None


def gep_element_type(instr):
    """The source element type of a ``getelementptr`` instruction (:attr:`Instr.element_type`)."""
    return instr.element_type


# ``%name = `` and a call's tail marker: what comes before the opcode's keyword
_HEAD = re.compile(r'(?:%(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)\s*=\s*)?(?:(?:tail|musttail|notail)\s+)?')
_WORD = re.compile(r"\s+([a-z_]+)(?=[\s,])")
_ALIGN = re.compile(r",\s*align\s+([0-9]+)")
FLAGS = frozenset(("nsw", "nuw", "exact", "disjoint", "nneg", "samesign", "inbounds", "nusw",
                   "fast", "nnan", "ninf", "nsz", "arcp", "contract", "afn", "reassoc"))
"""The flags an instruction's keyword may carry (wrap, exactness and fast-math flags)."""
MEMORY_OPS = ("load", "store", "alloca", "atomicrmw", "cmpxchg")
_ORDERING = ("atomic", "volatile", "weak")     # load/store atomic volatile, cmpxchg weak volatile


class Attributes:
    """What an instruction's text says beyond its opcode, type and operands (see the module
    docstring); the defaults for text that is not one instruction of ``opcode``."""

    __slots__ = ("predicate", "flags", "element_type", "allocated_type", "align", "volatile",
                 "atomic")

    def __init__(self, opcode, text):
        self.predicate = self.element_type = self.allocated_type = self.align = None
        self.flags, self.volatile, self.atomic = frozenset(), False, opcode in ("atomicrmw", "cmpxchg")
        pos = _HEAD.match(text).end()
        if not opcode or not text.startswith(opcode, pos) or "\n" in text:
            return
        pos += len(opcode)
        flags, words = [], set()
        while True:
            m = _WORD.match(text, pos)
            word = m.group(1) if m else None
            if word in FLAGS:
                flags.append(word)
            elif opcode in MEMORY_OPS and word in _ORDERING:
                words.add(word)
            else:
                break
            pos = m.end()
        self.flags = frozenset(flags)
        if opcode in ("icmp", "fcmp"):
            self.predicate = m.group(1) if m else None
        elif opcode == "getelementptr":
            self.element_type = _leading_type(text[pos:])
        elif opcode == "alloca":
            self.allocated_type = _leading_type(text[pos:])
        if opcode in MEMORY_OPS:
            align = _ALIGN.search(text, pos)
            self.align = int(align.group(1)) if align else None
            self.volatile = "volatile" in words
            self.atomic = self.atomic or "atomic" in words


def _leading_type(rest):
    """The type ``rest`` starts with: up to its first comma outside brackets."""
    depth = 0
    for k, ch in enumerate(rest):
        if ch in "[{<(":
            depth += 1
        elif ch in "]}>)":
            depth -= 1
        elif ch == "," and depth == 0:
            return rest[:k].strip()
    return rest.strip()


def strip_metadata(text):
    """``text`` without its metadata attachments (``, !noalias !3``): a copy placed
    elsewhere must not claim the aliasing facts of the original."""
    return _ATTACHED_METADATA.sub("", text)


def local(name):
    """The IR spelling of a local value or block name."""
    return "%" + name if _IDENT.match(name) else '%"' + name + '"'


def label(name):
    """The IR spelling of a block label line."""
    return name + ":" if _IDENT.match(name) else '"' + name + '":'


class Arg:
    """A function argument."""

    def __init__(self, name, type_, index):
        self.name, self.type, self.index = name, type_, index
        self.ref = local(name)

    def __repr__(self):
        return f"Arg({self.ref}: {self.type})"


class Operand:
    """A use of a value: its IR spelling, type, and definition (Instr, Arg or None for constants)."""

    def __init__(self, ref, type_, defn=None, kind=""):
        self.ref, self.type, self.defn, self.kind = ref, type_, defn, kind

    @property
    def is_const(self):
        return self.defn is None

    def __repr__(self):
        return f"{self.type} {self.ref}"


class Instr:
    """One instruction."""

    synthetic = False               # True for the instructions adcore adds (Synthetic)

    def __init__(self, block, name, opcode, type_, text, location=None):
        self.block, self.name, self.opcode, self.type = block, name, opcode, type_
        self.text = _METADATA.sub("", text.strip())
        self.location = location    # (file, line) from debug info, when the kernel has it
        self.ref = local(name) if name else None
        self.operands = []          # value operands (block operands are in succ / incoming)
        self.incoming = []          # phi: block of each operand
        self.succ = []              # terminator: successor blocks
        self.callee = None          # call: callee name

    @property
    def is_float(self):
        return is_float_type(self.type)

    _parsed = (None, None, None)    # (text, opcode, Attributes): parsed at the first read

    @property
    def attributes(self):
        """The :class:`Attributes` of the instruction's text, parsed once (again only when
        the text or opcode is replaced, as :mod:`adcore.frontend.index_signs` does)."""
        text, opcode, attrs = self._parsed
        if text is not self.text or opcode != self.opcode:
            attrs = Attributes(self.opcode, self.text)
            self._parsed = (self.text, self.opcode, attrs)
        return attrs

    @property
    def predicate(self):
        """An icmp's or fcmp's predicate (``slt``, ``oeq``), else None."""
        return self.attributes.predicate

    @property
    def flags(self):
        """The flags after the opcode's keyword (a frozenset of :data:`FLAGS`: ``nsw``,
        ``samesign``, ``inbounds``, ``fast``, ...)."""
        return self.attributes.flags

    @property
    def element_type(self):
        """A getelementptr's source element type (``double``, ``{ i64, ptr }``), else None."""
        return self.attributes.element_type

    @property
    def allocated_type(self):
        """The type an alloca allocates, else None."""
        return self.attributes.allocated_type

    @property
    def align(self):
        """A memory instruction's ``align N`` (an int), or None when it states none."""
        return self.attributes.align

    @property
    def volatile(self):
        """True for a volatile load, store, atomicrmw or cmpxchg."""
        return self.attributes.volatile

    @property
    def atomic(self):
        """True for an atomic load or store, an atomicrmw and a cmpxchg."""
        return self.attributes.atomic

    def __repr__(self):
        return self.text


class Synthetic(Instr):
    """An instruction adcore adds to the forward pass: a shadow pointer, a store keeping
    one in a shadow slot, or lines run before a call (custom-rule operand copies).
    ``reloadable``: the reverse pass may repeat it (a meminfo's data pointer);
    ``defines``: the values its lines define, each a Synthetic whose ``defined_by`` is
    this one."""

    synthetic = True

    def __init__(self, block, name, opcode, type_, text="", operands=()):
        super().__init__(block, name, opcode, type_, text)
        self.operands = list(operands)
        self.reloadable = False
        self.defines = []
        self.defined_by = None


class Block:
    def __init__(self, name):
        self.name = name
        self.ref = local(name)
        self.instrs = []
        self.preds = []             # distinct predecessor blocks, in first-seen order

    @property
    def term(self):
        return self.instrs[-1]

    @property
    def phis(self):
        return [i for i in self.instrs if i.opcode == "phi"]

    @property
    def succ(self):
        out = []
        for b in self.term.succ:
            if b not in out:
                out.append(b)
        return out

    def __repr__(self):
        return f"Block({self.name})"


class Function:
    def __init__(self, name, args, blocks):
        self.name, self.args, self.blocks = name, args, blocks
        self.entry = blocks[0]

    def instructions(self):
        for b in self.blocks:
            yield from b.instrs

    def uses(self):
        """``{id(value): [(instruction, operand position)]}`` for every argument and
        instruction some instruction uses."""
        out = {}
        for i in self.instructions():
            for k, o in enumerate(i.operands):
                if o.defn is not None:
                    out.setdefault(id(o.defn), []).append((i, k))
        return out


def _operand(value, defs):
    kind = value.value_kind.name
    if kind in ("instruction", "argument"):
        defn = defs[value.name]
        return Operand(local(defn.name), defn.type, defn, kind)
    type_ = str(value.type)
    if kind in ("function", "global_variable", "global_alias"):
        name = value.name
        ref = "@" + name if _IDENT.match(name) else '@"' + name + '"'
        return Operand(ref, type_, None, kind)
    text = str(value).strip()
    return Operand(text[len(type_):].strip() if text.startswith(type_) else text, type_, None, kind)


def source_locations(module_text):
    """``{metadata id: (file, line)}`` for the DILocations of a module with debug info."""
    nodes = dict(re.findall(r"^!([0-9]+) = (.*)$", module_text, re.M))
    files = {}

    def file_of(scope):
        if scope not in files:
            node = nodes.get(scope, "")
            m = re.search(r'filename: "([^"]*)"', node)
            if m:
                files[scope] = m.group(1)
            else:
                parent = re.search(r"(?:file|scope): !([0-9]+)", node)
                files[scope] = file_of(parent.group(1)) if parent else None
        return files[scope]

    out = {}
    for k, node in nodes.items():
        m = re.match(r"!DILocation\(line: ([0-9]+).*scope: !([0-9]+)", node)
        if m and int(m.group(1)) > 0:
            out[k] = (file_of(m.group(2)), int(m.group(1)))
    return out


def read_function(fn, locations=None):
    """Build a :class:`Function` from an llvmlite function ``ValueRef`` (``locations``
    from :func:`source_locations` attach source lines to instructions)."""
    with untimed_llvm_calls():
        return _read_function(fn, locations)


def _read_function(fn, locations):
    locations = locations or {}
    args = [Arg(a.name, str(a.type), i) for i, a in enumerate(fn.arguments)]
    defs = {a.name: a for a in args}
    blocks = {b.name: Block(b.name) for b in fn.blocks}
    raw = []
    for b in fn.blocks:
        block = blocks[b.name]
        for ins in b.instructions:
            text = str(ins)
            dbg = _DBG.search(text)
            instr = Instr(block, ins.name, ins.opcode, str(ins.type), text,
                          locations.get(dbg.group(1)) if dbg else None)
            block.instrs.append(instr)
            if ins.name:
                defs[ins.name] = instr
            raw.append((instr, ins))
    for instr, ins in raw:
        ops = list(ins.operands)
        if instr.opcode == "phi":
            instr.incoming = [blocks[b.name] for b in ins.incoming_blocks]
        if instr.opcode == "call":
            callee = ops.pop()
            instr.callee = callee.name or None
        for op in ops:
            if op.value_kind.name == "basic_block":
                instr.succ.append(blocks[op.name])
            else:
                instr.operands.append(_operand(op, defs))
    func = Function(fn.name, args, [blocks[b.name] for b in fn.blocks])
    for block in func.blocks:
        for s in block.succ:
            if block not in s.preds:
                s.preds.append(block)
    return func


def _bare(token):
    name = token[1:]
    return name[1:-1] if name.startswith('"') else name


def rename(text, mapping):
    """Replace each ``%name`` token of ``text`` (quoted or not) whose value is a key of
    ``mapping`` (spelt either way) by the mapped text."""
    bare = {_bare(k): v for k, v in mapping.items()}
    return _LOCAL.sub(lambda m: bare.get(_bare(m.group(0)), m.group(0)), text)
