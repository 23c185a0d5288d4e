"""What the Kubernetes client costs a process: start-up time and memory.

Against a local control plane with one node of 20 pods, prints the median wall time and
peak RSS of `nodeagent drain --dry-run` (a whole one-shot process: imports, kubeconfig,
first requests), the time to the first answer of a bare client, and the RSS of an idle
agent's imports (what preload loads).

    python bench/client_start.py                   # the nodeagent in this tree
    python bench/client_start.py --tree A --tree B # the ones in A and B (e.g. `git archive`
                                                   # of an older commit), taking turns
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hack import kubeutil as ku
from hack.localcluster.cluster import Cluster
from nodeagent.kube.client import Kube

RUNS = 7
PODS = 20

# Runs `argv` and prints its peak RSS in kB (the getrusage of a waited child).
PEAK = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
    "stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)
FIRST_ANSWER = (
    "import sys, time; t = time.monotonic(); from nodeagent.kube.client import Kube; "
    "Kube.from_kubeconfig(sys.argv[1]).get('/version'); print(time.monotonic() - t)"
)
IDLE_IMPORTS = (
    "from nodeagent.host.preload import preload; preload(); "
    "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS')))"
)


def python(tree: Path, *args: str) -> str:
    """Run Python in `tree` (first on sys.path, before an installed nodeagent)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(
        [sys.executable, *args], env=env, cwd=tree, capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def measure(cluster: Cluster, trees: list[Path]) -> list[str]:
    kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
    group, node, _spare = ku.node_pair(cluster, kube, "start")
    for i in range(PODS):
        ku.bare_pod(kube, group, f"p{i}", node)
    kc = str(cluster.kubeconfig)
    drain = ["-m", "nodeagent", "drain", "--dry-run", "--node", node, "--kubeconfig", kc]
    figures: dict[Path, dict[str, list[float]]] = {t: {} for t in trees}
    for _ in range(RUNS):  # the trees take turns, so load on the machine hits both alike
        for tree in trees:
            got = figures[tree]
            start = time.monotonic()
            python(tree, *drain)
            got.setdefault("wall", []).append(time.monotonic() - start)
            peak = int(python(tree, "-c", PEAK, sys.executable, *drain)) / 1024
            got.setdefault("peak", []).append(peak)
            got.setdefault("first", []).append(float(python(tree, "-c", FIRST_ANSWER, kc)))
            idle = int(python(tree, "-c", IDLE_IMPORTS)) / 1024
            got.setdefault("idle", []).append(idle)
    lines = []
    for tree, got in figures.items():
        m = {k: statistics.median(v) for k, v in got.items()}
        low = {k: min(v) for k, v in got.items()}  # on a shared machine, the best is the cost
        lines += [
            f"nodeagent from {tree} (best / median of {RUNS})",
            f"  drain --dry-run, {PODS} pods: {low['wall']:.3f}s / {m['wall']:.3f}s wall, "
            f"peak RSS {m['peak']:.1f} MB",
            f"  client built and first answer: {low['first']:.3f}s / {m['first']:.3f}s",
            f"  RSS after the agent's imports (preload): {m['idle']:.1f} MB",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", help="may be repeated")
    args = parser.parse_args()
    trees = [t.resolve() for t in args.tree or [Path(__file__).resolve().parent.parent]]
    with tempfile.TemporaryDirectory(prefix="nodeagent-bench-") as tmp:
        cluster = Cluster.start(Path(tmp))
        try:
            lines = measure(cluster, trees)
        finally:
            cluster.stop()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
