"""What every command shares that is not click: the configuration from the flags, logging,
one-line errors with their exit codes, and `run` itself.

Both ways in import it and it imports neither, so they do not import each other in a
circle: the entry point (nodeagent/agent/launch.py) runs the daemon from here without click,
the click CLI (nodeagent/cli.py) builds every command on it.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from nodeagent.agent.logs import setup_logging
from nodeagent.config import Config, ConfigError
from nodeagent.config import load as load_config

F = TypeVar("F", bound=Callable[..., Any])


def run_daemon(params: dict[str, Any]) -> None:
    """`nodeagent run`: load the configuration and run the agent until it stops."""
    verbose = params.get("verbose", 0)
    cfg = build_config(params)
    setup_logging(verbose, cfg.log_format, milestones=True)
    check_rejection(cfg)
    from nodeagent.host.preload import preload

    preload(cfg)  # a package upgrade must not give this process a mix of versions
    from nodeagent import metrics

    metrics.enable()  # before anything counts
    from nodeagent.agent.daemon import Agent
    from nodeagent.agent.loops import Notifier
    from nodeagent.kube.credentials import connect

    notifier = Notifier()
    kube, identity = connect(cfg, daemon=True, notify=notifier.send)
    sys.exit(Agent(cfg, kube, notifier, identity=identity).run())


def fail(message: str, code: int) -> NoReturn:
    print(f"nodeagent: error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def check_rejection(cfg: Config) -> None:
    """Refuse a [rejection] section whose wipe would refuse paths for every pod."""
    if not (cfg.rejection.state_paths or cfg.rejection.hooks or cfg.rejection.state_roots):
        return
    from nodeagent.rejection.wipe import config_problems

    problems = config_problems(cfg.rejection)
    if problems:
        raise ConfigError(f"rejection: {problems[0]}")


# The flag behind each config key a flag can set, so errors name what the user typed.
FLAGS = {
    "kubeconfig": "--kubeconfig",
    "node": "--node",
    "log_format": "--log-format",
    "drain.deadline": "--deadline",
    "drain.force_after_deadline": "--force-after-deadline",
    "drain.do_not_disrupt_ceiling": "--do-not-disrupt-ceiling",
    "drain.finished_pods": "--finished-pods",
}


def build_config(params: dict[str, Any], overrides: dict[str, Any] | None = None) -> Config:
    flags = {
        "kubeconfig": params.pop("kubeconfig"),
        "node": params.pop("node"),
        "log_format": params.pop("log_format"),
    }
    try:
        cfg = load_config(
            params.pop("config_file"), overrides={**flags, **(overrides or {})}, flags=FLAGS
        )
    except ConfigError as exc:
        fail(str(exc), 2)
    setup_logging(params.pop("verbose"), cfg.log_format)
    return cfg


def handle_errors(func: F) -> F:
    """Turn the errors users cause or meet into one line and a distinct exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from nodeagent.fence.marker import CordonedByOther
        from nodeagent.host.nodeclaim import AgentClaimError
        from nodeagent.kube.errors import KubeConfigError, KubeError

        try:
            return func(*args, **kwargs)
        except (ConfigError, KubeConfigError) as exc:
            fail(str(exc), 2)
        except AgentClaimError as exc:
            fail(f"{exc} (set lock_file, or NODEAGENT_LOCK_FILE)", 1)
        except CordonedByOther as exc:
            fail(str(exc), 4)
        except KubeError as exc:
            fail(str(exc), 1)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except Exception as exc:  # a bug: still one line, and the stack only with -vv
            logging.getLogger(__name__).debug("internal error", exc_info=True)
            fail(f"internal error: {type(exc).__name__}: {exc} (run with -vv for details)", 1)

    return wrapper  # type: ignore[return-value]
