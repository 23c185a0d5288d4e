"""hack/matrix [--json FILE] [--pairs API/KUBELET ...] [--scenarios all|core] [--lock FILE]

One row per (API server, kubelet) version pair: the real-node scenarios (tests/test_realnode.py)
and the own-node refusals, as pytest counted them. Not a CI step: each new release is built
once (10-30 min cold), and a row's real-node suite boots a dozen nspawn nodes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from hack.k8sversion import VersionError, available, default_version, known

from .suites import REALNODE_ALL, REALNODE_CORE, REFUSALS, Outcome, Pair, SuiteError, build, run

HEADER = "| API server | kubelet | real-node scenarios | own-node refusals |\n|---|---|---|---|"


def default_pairs() -> list[Pair]:
    """Newest with its own kubelet, newest with the oldest kubelet (skew), oldest with its own,
    and the harness's default release for reference."""
    versions = available()
    newest, oldest, usual = versions[-1], versions[0], default_version()
    pairs = [Pair(newest, newest), Pair(newest, oldest), Pair(oldest, oldest), Pair(usual, usual)]
    return list(dict.fromkeys(pairs))


def parse_pair(text: str) -> Pair:
    api, sep, kubelet = text.partition("/")
    if not sep:
        raise argparse.ArgumentTypeError(f"want API/KUBELET (e.g. 1.37.2/1.34.4), got {text!r}")
    try:
        return Pair(known(api), known(kubelet))
    except VersionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hack/matrix", description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", nargs="+", type=parse_pair, metavar="API/KUBELET")
    parser.add_argument("--scenarios", choices=("all", "core"), default="all")
    parser.add_argument("--only", choices=("realnode", "refusals"))
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every row and failure")
    parser.add_argument(
        "--lock", type=Path, metavar="FILE", help="flock FILE around each real-node suite"
    )
    return parser


def row(pair: Pair, args: argparse.Namespace) -> dict[str, Outcome]:
    try:
        build(pair)
    except SuiteError as exc:
        return {"realnode": Outcome(error=str(exc)), "refusals": Outcome(error=str(exc))}
    realnode = REALNODE_CORE if args.scenarios == "core" else REALNODE_ALL
    out: dict[str, Outcome] = {}
    if args.only in (None, "refusals"):
        out["refusals"] = run(pair, REFUSALS, None)
    if args.only in (None, "realnode"):
        try:
            out["realnode"] = run(pair, realnode, args.lock)
        except SuiteError as exc:
            out["realnode"] = Outcome(error=str(exc))
    return out


def table(rows: list[tuple[Pair, dict[str, Outcome]]]) -> str:
    lines = [HEADER]
    for pair, result in rows:
        cells = [result[k].cell() if k in result else "-" for k in ("realnode", "refusals")]
        lines.append(f"| {pair.api} | {pair.kubelet} | {cells[0]} | {cells[1]} |")
    for pair, result in rows:
        for suite, outcome in result.items():
            for name, why in outcome.failures.items():
                lines.append(f"{pair.label} {suite}: FAILED {name}: {why}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    pairs = args.pairs or default_pairs()
    started = time.monotonic()
    rows: list[tuple[Pair, dict[str, Outcome]]] = []
    for pair in pairs:
        print(f"== {pair.label} (API server / kubelet)", file=sys.stderr, flush=True)
        rows.append((pair, row(pair, args)))
        if args.json:
            write_json(args.json, rows, args)
    print(table(rows))
    print(f"({len(rows)} rows in {time.monotonic() - started:.0f} s)")
    clean = all(not o.error and not o.failed for _, r in rows for o in r.values())
    return 0 if clean else 1


def write_json(
    path: Path, rows: list[tuple[Pair, dict[str, Outcome]]], args: argparse.Namespace
) -> None:
    doc = {
        "scenarios": args.scenarios,
        "rows": [
            {"api": p.api, "kubelet": p.kubelet, **{k: asdict(o) for k, o in r.items()}}
            for p, r in rows
        ],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
