"""Bad input at every door: empty values, files that are not what they claim, zero
durations, garbage for every command. One line, the right exit code, no traceback,
nothing touched."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from hack import kubeutil as ku
from nodeagent.config import Config, ConfigError, env_var, leaf_fields, load
from nodeagent.drain.engine import Drain, DrainOptions
from nodeagent.kube.client import Kube, KubeError

COMMANDS = ("drain", "uncordon", "status", "wipe", "run")


def toml_for(dotted: str, value: str) -> str:
    section, _, key = dotted.rpartition(".")
    return f"[{section}]\n{key} = {value}\n" if section else f"{key} = {value}\n"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
    env.pop("NODE_NAME", None)
    env.pop("KUBECONFIG", None)
    return env | extra


def one_line_error(res: Any, code: int = 2) -> str:
    """The one line on stderr, after checking the shape every error must have."""
    assert "Traceback" not in res.stderr, res.stderr
    assert "internal error" not in res.stderr, res.stderr
    assert res.returncode == code, (res.returncode, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nodeagent: error: "), res.stderr
    # Every message carries its cause: nothing ends on a dangling colon.
    assert not lines[0].rstrip().endswith(":"), lines[0]
    return str(lines[0])


# -- item 1: an explicitly empty value is an error, wherever it comes from ------------


def empty_has_a_meaning(dotted: str) -> bool:
    """Whether the key's field declares what "" means (metadata `empty_means`)."""
    return "empty_means" in dict(leaf_fields())[dotted].metadata


def value_of(cfg: Config, dotted: str) -> Any:
    value: Any = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def test_an_empty_value_with_a_meaning_is_not_the_default() -> None:
    """Only a key whose "" means something other than its default may accept "":
    otherwise an explicitly empty value would silently be the default."""
    meaningful = [k for k, f in leaf_fields() if "empty_means" in f.metadata]
    assert meaningful, "no key declares empty_means: drop the exception in the tests below"
    for dotted in meaningful:
        assert value_of(Config(), dotted) != "", f"{dotted}: its default is already its empty value"


@pytest.mark.parametrize("blank", ['""', '"  "'])
@pytest.mark.parametrize("dotted", [k for k, _ in leaf_fields()])
def test_every_config_key_refuses_an_empty_string(dotted: str, blank: str, tmp_path: Path) -> None:
    if empty_has_a_meaning(dotted) and blank == '""':
        cfg = load(str(ku.write(tmp_path / "c.toml", toml_for(dotted, blank))), {})
        assert value_of(cfg, dotted) == ""  # its documented meaning, e.g. "off"
        return
    path = ku.write(tmp_path / "c.toml", toml_for(dotted, blank))
    with pytest.raises(ConfigError, match=rf"^{dotted}: empty value \(give a value, or remove"):
        load(str(path), {})


@pytest.mark.parametrize("dotted", [k for k, f in leaf_fields() if "list" in str(f.type)])
def test_list_keys_refuse_empty_items(dotted: str, tmp_path: Path) -> None:
    path = ku.write(tmp_path / "c.toml", toml_for(dotted, '["a", ""]'))
    with pytest.raises(ConfigError, match=rf"^{dotted}: empty item"):
        load(str(path), {})
    with pytest.raises(ConfigError, match=rf"^{env_var(dotted)}: empty item"):
        load(None, {env_var(dotted): "a,,b"})


@pytest.mark.parametrize("blank", ["", " "])
@pytest.mark.parametrize("var", [env_var(k) for k, _ in leaf_fields()] + ["NODE_NAME"])
def test_every_variable_refuses_an_empty_value(var: str, blank: str) -> None:
    dotted = {env_var(k): k for k, _ in leaf_fields()}.get(var)
    if dotted and empty_has_a_meaning(dotted) and blank == "":
        assert value_of(load(None, {var: blank}), dotted) == ""
        return
    with pytest.raises(ConfigError, match=rf"^{var}: empty value \(give a value, or unset"):
        load(None, {var: blank})


def test_node_name_only_from_a_source_that_names_one() -> None:
    assert load(None, {"NODE_NAME": "n1"}).node_name == "n1"
    assert load(None, {"NODE_NAME": "n1", "NODEAGENT_NODE": "n2"}).node_name == "n2"
    assert load(None, {"NODE_NAME": "n1"}, {"node": "n3"}).node_name == "n3"
    # NODE_NAME set but empty is an error only when it would be used.
    assert load(None, {"NODE_NAME": ""}, {"node": "n3"}).node_name == "n3"
    with pytest.raises(ConfigError, match=r"^--node: empty value"):
        load(None, {"NODE_NAME": "n1"}, {"node": ""}, {"node": "--node"})
    with pytest.raises(ConfigError, match=r"^--node: 'N1/x' is not a node name"):
        load(None, {}, {"node": "N1/x"}, {"node": "--node"})


def test_empty_node_flag_drains_nothing(cluster: Any, kube: Kube, admin_kubeconfig: str) -> None:
    """`--node "$UNSET"` must not fall back to $NODE_NAME (or the host name) and drain
    that node."""
    name = ku.unique("empty")
    cluster.add_node(name, {})
    before = ku.node(kube, name)
    for args, env in [
        (["--node", ""], clean_env(NODE_NAME=name)),
        (["--node", "  "], clean_env(NODE_NAME=name)),
        ([], clean_env(NODE_NAME=name, NODEAGENT_NODE="")),
        (["--kubeconfig", ""], clean_env(NODE_NAME=name)),
        (["--config", ""], clean_env(NODE_NAME=name)),
        (["--deadline", ""], clean_env(NODE_NAME=name)),
        (["--do-not-disrupt-ceiling", ""], clean_env(NODE_NAME=name)),
    ]:
        kc = [] if "--kubeconfig" in args else ["--kubeconfig", admin_kubeconfig]
        res = ku.run_agent("drain", *kc, *args, env=env)
        line = one_line_error(res)
        assert "empty value" in line, line
    res = ku.run_agent("drain", "--node", name, env=clean_env(KUBECONFIG=""))
    assert one_line_error(res) == (
        "nodeagent: error: KUBECONFIG: empty value (unset it, or name a kubeconfig file)"
    )
    after = ku.node(kube, name)
    assert after["spec"] == before["spec"]
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")


# -- item 3: zero and negative durations ----------------------------------------------


@pytest.mark.parametrize(
    ("dotted", "value", "ok"),
    [
        ("drain.deadline", "0s", False),
        ("drain.deadline", "500ms", False),
        ("drain.deadline", "1s", True),
        ("drain.deadline", "-5s", False),
        ("uncordon.ready_timeout", "0s", False),
        ("rejection.wipe_timeout", "0s", False),
        ("reporting.heartbeat_interval", "0s", False),
        # Zero has a meaning here: no wait.
        ("drain.do_not_disrupt_ceiling", "0s", True),
        ("uncordon.settle", "0s", True),
        ("rejection.recreate_backoff", "0s", True),
    ],
)
def test_zero_durations(dotted: str, value: str, ok: bool) -> None:
    if ok:
        load(None, {env_var(dotted): value})
    else:
        with pytest.raises(ConfigError, match=rf"^{env_var(dotted)}: (must be at least|bad dur)"):
            load(None, {env_var(dotted): value})


def test_zero_deadline_flag_is_refused() -> None:
    res = ku.run_agent("drain", "--node", "n", "--deadline", "0s", env=clean_env())
    assert one_line_error(res) == "nodeagent: error: --deadline: must be at least 1s, got '0s'"


def test_drain_that_runs_out_of_time_says_why(cluster: Any, kube: Kube) -> None:
    """The engine's own error names its cause (it said "could not list pods: ")."""
    name = ku.unique("zero")
    cluster.add_node(name, {})
    with pytest.raises(KubeError) as err:
        Drain(kube, name, DrainOptions(deadline=0.0)).run()
    assert str(err.value) == (
        f"could not list pods on node {name}: no answer within the drain deadline (0s)"
    )


# -- item 2: files that are not what they claim ---------------------------------------


def kubeconfig_garbage(tmp: Path) -> dict[str, tuple[Path, str]]:
    """name -> (file, what the one line must say about it)."""
    entry = (
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    files = {
        "random bytes": (os.urandom(512) + b"\xff\xfe", "not a text file"),
        "a YAML string": (b'"just a string"\n', "the top level is a string"),
        "a YAML list": (b"- a\n- b\n", "the top level is a list"),
        "a number": (b"42\n", "the top level is a number"),
        "empty": (b"", "empty file"),
        "broken YAML": (b"clusters: [\n", "not YAML at line"),
        "clusters not a list": (b"apiVersion: v1\nclusters: 3\n", "clusters is a number"),
        "bad base64": (
            (entry + "users: [{name: u, user: {client-key-data: '!!'}}]\n").encode(),
            "client-key-data: not base64",
        ),
        "no such context": (
            (entry + "users: [{name: u, user: {}}]\n")
            .replace("current-context: x", "current-context: y")
            .encode(),
            "y",
        ),
    }
    garbage = tmp / "garbage.pem"
    garbage.write_bytes(os.urandom(300))
    files |= {
        "client certificate not PEM": (
            (entry + f"users: [{{name: u, user: {{client-certificate: {garbage}, "
             f"client-key: {garbage}}}}}]\n").encode(),
            f"client-certificate {garbage}, client-key {garbage}: not a PEM certificate",
        ),
        "CA file missing": (
            entry.replace("server: 'https://127.0.0.1:1'",
                          "server: 'https://127.0.0.1:1', certificate-authority: ca.pem").encode()
            + b"users: [{name: u, user: {}}]\n",
            f"certificate-authority {tmp / 'ca.pem'}: No such file or directory",
        ),
        "token file missing": (
            (entry + "users: [{name: u, user: {tokenFile: /nonexistent/token}}]\n").encode(),
            "tokenFile /nonexistent/token: No such file or directory",
        ),
    }  # fmt: skip
    out = {}
    for i, (name, (data, says)) in enumerate(files.items()):
        path = tmp / f"kc{i}"
        path.write_bytes(data)
        out[name] = (path, says)
    out["a directory"] = (tmp, "not a file")
    out["missing"] = (tmp / "nope", "no such file")
    return out


def garbage_cases(tmp: Path) -> list[tuple[str, list[str], dict[str, str], str]]:
    """(what, args, extra env, what the line must contain): all usage/config errors."""
    bad_toml = ku.write(tmp / "bad.toml", "[drain]\ndeadline = [1, 2]\nconcurrency = -3\n")
    rand_toml = tmp / "rand.toml"
    rand_toml.write_bytes(os.urandom(256))
    cases = [
        (f"kubeconfig: {name}", ["--kubeconfig", str(path)], {}, f"kubeconfig {path}: ")
        for name, (path, _) in kubeconfig_garbage(tmp).items()
    ]
    cases += [
        ("config: random bytes", ["--config", str(rand_toml)], {}, "config file"),
        ("config: wrong types", ["--config", str(bad_toml)], {}, "drain.deadline: bad duration"),
        ("node: path", ["--node", "../etc/passwd"], {}, "not a node name"),
        ("node: unicode", ["--node", "nöde"], {}, "not a node name"),
        ("node: long", ["--node", "a" * 300], {}, "not a node name"),
        ("env: bad int", [], {"NODEAGENT_DRAIN_CONCURRENCY": "many"}, "expected an integer"),
        ("env: bad bool", [], {"NODEAGENT_SHUTDOWN_USE_LOGIND": "maybe"}, "expected true"),
        ("env: bad address", [], {"NODEAGENT_REPORTING_METRICS_ADDRESS": "x"}, "bad address"),
        ("flag: unknown", ["--bogus"], {}, "No such option"),
        ("flag: bad choice", ["--log-format", "xml"], {}, "Invalid value for '--log-format'"),
    ]
    return cases


def test_garbage_to_every_command_gives_one_line(tmp_path: Path, admin_kubeconfig: str) -> None:
    runs = []
    for command in COMMANDS:
        extra = ["--pod", "default/x"] if command == "wipe" else []
        for what, args, env, says in garbage_cases(tmp_path):
            base = ["--node", "n1"] if "--node" not in args else []
            kc = ["--kubeconfig", admin_kubeconfig] if "--kubeconfig" not in args else []
            runs.append((command, what, [command, *base, *kc, *args, *extra], env, says))
    runs += [
        ("version", "flag: unknown", ["version", "--bogus"], {}, "No such option"),
        ("(none)", "command: unknown", ["evacuate"], {}, "No such command"),
        ("wipe", "pod: not NS/NAME", ["wipe", "--node", "n1", "--pod", "a/b/c"], {}, "--pod"),
        ("wipe", "pod: empty", ["wipe", "--node", "n1", "--pod", ""], {}, "--pod"),
    ]

    def one(run: tuple[str, str, list[str], dict[str, str], str]) -> str | None:
        command, what, args, env, says = run
        res = ku.run_agent(*args, env=clean_env(**env))
        try:
            line = one_line_error(res)
            assert says in line, line
        except AssertionError as exc:
            return f"{command} / {what}: {exc}"
        return None

    with ThreadPoolExecutor(max_workers=4) as pool:
        failures = [f for f in pool.map(one, runs) if f]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    "case",
    [
        "random bytes",
        "a YAML string",
        "a YAML list",
        "bad base64",
        "client certificate not PEM",
        "CA file missing",
        "token file missing",
    ],
)
def test_malformed_kubeconfig_is_one_line_naming_the_file(case: str, tmp_path: Path) -> None:
    path, says = kubeconfig_garbage(tmp_path)[case]
    res = ku.run_agent("status", "--node", "n1", "--kubeconfig", str(path), env=clean_env())
    line = one_line_error(res)
    assert line.startswith(f"nodeagent: error: kubeconfig {path}: ") and says in line, line


def test_runtime_errors_are_one_line_with_a_cause(cluster: Any, admin_kubeconfig: str) -> None:
    res = ku.run_agent(
        "status", "--node", ku.unique("absent"), "--kubeconfig", admin_kubeconfig, env=clean_env()
    )
    assert "not found" in one_line_error(res, 1)
    res = ku.run_agent(
        "wipe",
        "--node",
        "n1",
        "--pod",
        "default/absent",
        "--kubeconfig",
        admin_kubeconfig,
        env=clean_env(),
    )
    assert "not found" in one_line_error(res, 1)


def test_shipped_examples_load_as_the_defaults(tmp_path: Path) -> None:
    """The example config and the full block of docs/configuration.md are valid as written
    (they used to show `node = ""`, which is now an error) and say what the defaults are;
    every other TOML example in the README and docs/ loads as written."""
    root = Path(__file__).resolve().parent.parent
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    blocks = [b.split("```", 1)[0] for d in docs for b in d.read_text().split("```toml\n")[1:]]
    full = (root / "docs/configuration.md").read_text().split("```toml\n", 1)[1].split("```", 1)[0]
    for path in (root / "packaging/etc/nodeagent/config.toml", ku.write(tmp_path / "r", full)):
        assert load(str(path), {}) == Config(), path
    for i, block in enumerate(blocks):
        load(str(ku.write(tmp_path / f"b{i}", block)), {})  # a bad key or value raises
