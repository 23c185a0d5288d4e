"""The YAML that kubeconfigs are written in, read without PyYAML: block mappings and
sequences of plain or simply quoted words, as kubeadm, the kubelet's TLS bootstrap, k3s,
kubectl and cloud CLIs write them.

PyYAML, with its libyaml extension and the 18 modules `import yaml` loads, costs every
agent 1.0 MB of resident memory for reading one small file at start (bench/fleet.py). So
the kubeconfig is read here when it keeps to this subset, where the result is PyYAML's
safe_load to the value (tests/test_plainyaml.py compares the two); anything else raises
Unsupported, and nodeagent/kube/kubeconfig.py hands the text to PyYAML, errors included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


class Unsupported(Exception):
    """Outside the subset (not necessarily wrong): PyYAML reads it."""


@dataclass(frozen=True)
class _Line:
    indent: int
    text: str


# The words YAML 1.1 (PyYAML's resolver) reads as booleans and null.
BOOLS = {
    **dict.fromkeys(("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"), True),
    **dict.fromkeys(("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"), False),
}
NULLS = ("null", "Null", "NULL", "~")
# A plain word that no resolver reads as anything but a string: it starts with a letter,
# `_` or `/` (numbers, timestamps, `.inf`, `<<`, `=` and `~` start otherwise) and holds no
# space, quote, `#` or flow indicator.
_WORD = re.compile(r"[A-Za-z_/][A-Za-z0-9_./:@+=%?&-]*")
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_./-]*):(?: +(.*))?")


def parse(text: str) -> Any:
    """The document in `text` as PyYAML's safe_load reads it; Unsupported if outside the
    subset."""
    lines = []
    for raw in text.splitlines():
        if "\t" in raw or " #" in raw:
            raise Unsupported("tab or comment after content")
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if raw.startswith(("---", "...", "%")):
            raise Unsupported("document marker or directive")
        lines.append(_Line(len(raw) - len(raw.lstrip(" ")), stripped))
    if not lines:
        return None
    if lines[0].indent:
        raise Unsupported("indented document")
    value, end = _block(lines, 0, 0)
    if end != len(lines):
        raise Unsupported(f"line {end + 1} does not continue the document")
    return value


def _item(line: _Line) -> bool:
    return line.text == "-" or line.text.startswith("- ")


def _block(lines: list[_Line], i: int, indent: int) -> tuple[Any, int]:
    return _sequence(lines, i, indent) if _item(lines[i]) else _mapping(lines, i, indent)


def _nested(lines: list[_Line], i: int, indent: int, compact: bool) -> tuple[Any, int]:
    """The value that begins on line i under a key (or `-`) at `indent`: deeper lines, or a
    sequence at the same indentation under a key (`compact`); none is null."""
    if i < len(lines):
        deeper = lines[i].indent > indent
        if deeper or (compact and lines[i].indent == indent and _item(lines[i])):
            return _block(lines, i, lines[i].indent)
    return None, i


def _mapping(lines: list[_Line], i: int, indent: int) -> tuple[dict[str, Any], int]:
    found: dict[str, Any] = {}
    while i < len(lines) and lines[i].indent == indent and not _item(lines[i]):
        m = _KEY.fullmatch(lines[i].text)
        if m is None or m.group(1) in BOOLS or m.group(1) in NULLS:
            raise Unsupported(f"line {i + 1}: not a plain key")
        rest = (m.group(2) or "").strip()
        if rest:
            found[m.group(1)], i = _scalar(rest, i), i + 1
        else:
            found[m.group(1)], i = _nested(lines, i + 1, indent, compact=True)
    if i < len(lines) and lines[i].indent > indent:
        raise Unsupported(f"line {i + 1}: deeper than its mapping")
    return found, i


def _sequence(lines: list[_Line], i: int, indent: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    while i < len(lines) and lines[i].indent == indent and _item(lines[i]):
        rest = lines[i].text[1:]
        body = rest.lstrip(" ")
        if not body:
            value, i = _nested(lines, i + 1, indent, compact=False)
        elif _KEY.fullmatch(body):  # `- key: value`: a mapping whose keys line up with `key`
            column = indent + 1 + len(rest) - len(body)
            lines[i] = _Line(column, body)
            value, i = _mapping(lines, i, column)
        elif body.startswith("-"):
            raise Unsupported(f"line {i + 1}: a sequence in a sequence")
        else:
            value, i = _scalar(body, i), i + 1
        items.append(value)
    if i < len(lines) and lines[i].indent > indent:
        raise Unsupported(f"line {i + 1}: deeper than its sequence")
    return items, i


def _scalar(text: str, i: int) -> Any:
    if text in ("{}", "[]"):
        return {} if text == "{}" else []
    if len(text) >= 2 and text[0] == text[-1] == '"' and not re.search(r'["\\]', text[1:-1]):
        return text[1:-1]
    if len(text) >= 2 and text[0] == text[-1] == "'" and "'" not in text[1:-1].replace("''", ""):
        return text[1:-1].replace("''", "'")
    if text in BOOLS:
        return BOOLS[text]
    if text in NULLS:
        return None
    if _WORD.fullmatch(text) and not text.endswith(":"):
        return text
    raise Unsupported(f"line {i + 1}: not a plain or simply quoted word")
