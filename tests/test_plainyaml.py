"""Kubeconfig YAML read without PyYAML (nodeagent/kube/plainyaml.py): for every text in the
subset the value is PyYAML's safe load (with libyaml, as the agent read it before) to the
last detail; every text outside it is left to PyYAML (Unsupported), never read differently."""

from __future__ import annotations

import random
import string
from typing import Any

import pytest
import yaml

from nodeagent.kube import plainyaml
from nodeagent.kube.kubeconfig import YamlError, parse_yaml

KUBEADM = """\
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=
    server: https://10.0.0.1:6443
  name: kubernetes
contexts:
- context:
    cluster: kubernetes
    user: system:node:worker-1
  name: system:node:worker-1@kubernetes
current-context: system:node:worker-1@kubernetes
kind: Config
preferences: {}
users:
- name: system:node:worker-1
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem
"""

EXEC = """\
# written by a cloud CLI
apiVersion: v1
kind: Config
clusters:
  - name: arn:aws:eks:eu-west-1:123456789012:cluster/prod
    cluster:
      server: https://ABCDEF.gr7.eu-west-1.eks.amazonaws.com
      insecure-skip-tls-verify: false
      proxy-url: http://proxy.example:3128
contexts:
  - name: prod
    context: {cluster: x, user: y}
users:
  - name: prod
    user:
      exec:
        apiVersion: client.authentication.k8s.io/v1beta1
        command: aws
        args:
          - --region
          - eu-west-1
        env:
        - name: AWS_PROFILE
          value: "prod"
        - name: EMPTY
          value: ''
        interactiveMode: IfAvailable
        provideClusterInfo: true
      token:
current-context: prod
"""

IN_SUBSET = {
    "kubeadm": KUBEADM,
    "compact and indented sequences, quotes, booleans, null": EXEC.replace(
        "    context: {cluster: x, user: y}\n", "    context:\n      cluster: x\n      user: y\n"
    ).replace(
        "          - --region\n          - eu-west-1\n", "          - region\n          - 'it''s'\n"
    ),
    "empty": "",
    "comments only": "# nothing\n\n",
    "nulls and booleans": "a: ~\nb: null\nc: Yes\nd: off\ne: TRUE\nf:\ng: []\n",
    "sequence of words and nulls": "- a\n-\n- b\n",
    "dashes lined up further": "-   name: x\n    value: y\n- name: z\n",
    "nested under a dash": "-\n  a: b\n- c\n",
    "URLs and base64": "u: https://h:6443/p?q=1&r=%20\nd: QUJD+/==\n",
}
TO_PYYAML = {
    "flow mapping": EXEC,
    "a number": "port: 6443\n",
    "a timestamp": "t: 2001-12-14\n",
    "a word starting with a digit": "name: 1cluster\n",
    "anchor and alias": "a: &x b\nc: *x\n",
    "block scalar": "a: |\n  text\n",
    "folded plain scalar": "a: one\n  two\n",
    "comment after content": "a: b # c\n",
    "escape in double quotes": 'a: "b\\tc"\n',
    "space in a word": "a: b c\n",
    "document marker": "---\na: b\n",
    "tab": "a:\tb\n",
    "boolean key": "on: b\n",
    "quoted key": '"a": b\n',
    "sequence in a sequence": "- - a\n",
    "top-level word": "hello\n",
    "bad indentation": "a:\n    b: c\n  d: e\n",
    "a mapping then a dash": "a: b\n- c\n",
    "indented document": "  a: b\n",
    "tag": "a: !!str b\n",
}


@pytest.mark.parametrize("text", IN_SUBSET.values(), ids=IN_SUBSET.keys())
def test_the_subset_reads_as_pyyaml_reads_it(text: str) -> None:
    assert plainyaml.parse(text) == reference(text)
    assert parse_yaml(text) == reference(text)


@pytest.mark.parametrize("text", TO_PYYAML.values(), ids=TO_PYYAML.keys())
def test_anything_else_is_left_to_pyyaml(text: str) -> None:
    with pytest.raises(plainyaml.Unsupported):
        plainyaml.parse(text)
    try:
        expected = reference(text)
    except yaml.YAMLError:
        with pytest.raises(YamlError):
            parse_yaml(text)
    else:
        assert parse_yaml(text) == expected


def reference(text: str) -> Any:
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


WORDS = ["a", "name", "https://h:1/x", "system:node:n1", "LS0t+/=", "x_y.z-w", "/var/lib/k"]


def value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(6 if depth < 4 else 3)
    if kind == 0:
        return rng.choice(WORDS)
    if kind == 1:
        return rng.choice([True, False, None, "", "a b", "it's", "#x"])
    if kind == 2:
        return "".join(rng.choice(string.ascii_letters) for _ in range(rng.randrange(1, 8)))
    if kind == 3:
        return [value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = [rng.choice([*WORDS[:2], "k-1", "k.2", "k/3"]) for _ in range(rng.randrange(4))]
    return {k: value(rng, depth + 1) for k in keys}


@pytest.mark.parametrize("seed", range(200))
def test_what_pyyaml_writes_reads_back_alike(seed: int) -> None:
    """safe_dump's output (what some kubeconfig writers produce), whichever way it goes."""
    rng = random.Random(seed)
    doc = {"apiVersion": "v1", "items": value(rng, 0), "more": value(rng, 0)}
    for indent in (2, 4):
        text = yaml.safe_dump(doc, default_flow_style=False, indent=indent)
        try:
            got = plainyaml.parse(text)
        except plainyaml.Unsupported:
            continue
        assert got == reference(text) == doc, text


def test_the_fast_path_is_taken_for_what_kubeconfig_writers_write() -> None:
    """The generated documents above are not all left to PyYAML."""
    text = yaml.safe_dump({"clusters": [{"cluster": {"server": "https://h:1"}, "name": "c"}]})
    assert plainyaml.parse(text) == {
        "clusters": [{"cluster": {"server": "https://h:1"}, "name": "c"}]
    }
