"""Read CuTe's printed spelling back: ``((2,2),3):((24,2),8)``, ``(4,8):(1@0,1@1)``, ``Sw<3,3,3> o 0 o 8:1``."""
from __future__ import annotations

import re

from .int_tuple import CuteError, ScaledBasis
from .layout import Layout
from .swizzle import ComposedLayout, Swizzle

__all__ = ["parse", "parse_int_tuple"]

#: deepest tuple nesting accepted (CuTe layouts nest a handful of levels)
MAX_DEPTH = 64


def _text(text) -> str:
    if not isinstance(text, str):
        raise CuteError(f"parse: expected a str such as '(2,3):(1,2)', got {type(text).__name__}: {text!r}"[:300])
    return text

_TOKEN = re.compile(r"\s*(-?\d+|[(),:@])")
_SWIZZLE = re.compile(r"\s*(?:Sw<\s*(-?\d+)\s*,\s*(-?\d+)\s*,\s*(-?\d+)\s*>|SW_(\d+)_(\d+)_(-?\d+))\s*$")


def _tokens(text: str) -> list:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise CuteError(f"parse: unexpected {text[pos:pos + 10]!r} at position {pos} in {text!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


class _Reader:
    def __init__(self, text: str):
        self.text, self.toks, self.i = text, _tokens(text), 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want=None):
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise CuteError(f"parse: expected {want or 'a token'} at token {self.i}, got {tok!r} in {self.text!r}")
        self.i += 1
        return tok

    def tree(self, depth: int = 0):
        if self.peek() == "(":
            if depth >= MAX_DEPTH:
                raise CuteError(f"parse: tuples nested deeper than {MAX_DEPTH} in {self.text[:80]!r}...")
            self.take("(")
            items = []
            if self.peek() != ")":
                items.append(self.tree(depth + 1))
                while self.peek() == ",":
                    self.take(",")
                    items.append(self.tree(depth + 1))
            self.take(")")
            return tuple(items)
        tok = self.take()
        if not re.fullmatch(r"-?\d+", tok):
            raise CuteError(f"parse: expected an integer, got {tok!r} in {self.text!r}")
        value, modes = int(tok), []
        while self.peek() == "@":
            self.take("@")
            modes.append(int(self.take()))
        return ScaledBasis(value, tuple(modes)) if modes else value

    def done(self):
        if self.peek() is not None:
            raise CuteError(f"parse: trailing {self.peek()!r} in {self.text!r}")


def parse_int_tuple(text: str):
    """``((2,2),3)`` -> ((2, 2), 3); ``(4)`` is a 1-tuple, as CuTe prints it."""
    r = _Reader(_text(text))
    out = r.tree()
    r.done()
    return out


def parse(text: str):
    """A Layout from ``shape:stride``, or a ComposedLayout from ``Sw<b,m,s> o offset o shape:stride``."""
    parts = [p.strip() for p in re.split(r"\s+o\s+", _text(text).strip())]
    if len(parts) == 3:
        m = _SWIZZLE.match(parts[0])
        outer = Swizzle(*(int(g) for g in (m.groups()[:3] if m.group(1) else m.groups()[3:]))) if m else parse(parts[0])
        offset = int(parts[1]) if re.fullmatch(r"-?\d+", parts[1]) else parse_int_tuple(parts[1])
        return ComposedLayout(outer, offset, parse(parts[2]))
    if len(parts) != 1:
        raise CuteError(f"parse: {text!r} is neither shape:stride nor 'swizzle o offset o layout'")
    r = _Reader(parts[0])
    shape = r.tree()
    r.take(":")
    stride = r.tree()
    r.done()
    return Layout(shape, stride)


def _parse_layout(text: str) -> Layout:
    """Read CuTe's spelling of a Layout back (``((2,2),3):((24,2),8)``)."""
    out = parse(text)
    if not isinstance(out, Layout):
        raise CuteError(f"Layout.parse: {text!r} is a composed layout; use cute.parse")
    return out


Layout.parse = staticmethod(_parse_layout)   # see Layout's docstring: layout.py does not import the parser
