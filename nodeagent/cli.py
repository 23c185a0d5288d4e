"""Command line: `nodeagent drain | uncordon | status | wipe | run | version`.

Exit codes: 0 ok, 1 runtime error (API unreachable, forbidden, node not found),
2 bad usage or configuration, 3 drain deadline reached with pods left,
4 uncordon refused (cordoned by someone else).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from nodeagent import __version__
from nodeagent.agent.command import (
    F,
    build_config,
    check_rejection,
    fail,
    handle_errors,
    run_daemon,
)

if TYPE_CHECKING:
    from nodeagent.report.events import EventRecorder

# How long a one-shot command waits for its Events to be sent before it exits: each is one
# request of the client's own timeout; on a busy API server 2 s lost some.
EVENTS_FLUSH_S = 10.0


def flush_events(events: EventRecorder) -> None:
    """Wait for the command's Events; those still unsent when it exits are said."""
    if not events.flush(EVENTS_FLUSH_S):
        click.echo(f"nodeagent: warning: Events not sent within {EVENTS_FLUSH_S:.0f}s", err=True)


def common_options(func: F) -> F:
    """Flags every command shares; they override the config file and env."""
    opts = [
        click.option(
            "--kubeconfig",
            metavar="FILE",
            help="Kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config except for "
            "run, then the kubelet's own).",
        ),
        click.option(
            "--node",
            metavar="NAME",
            help="Node name (default: $NODE_NAME, the kubelet certificate's, the host name).",
        ),
        click.option(
            "--config",
            "config_file",
            metavar="FILE",
            type=click.Path(dir_okay=False),
            help="TOML config file.",
        ),
        click.option("-v", "--verbose", count=True, help="More log output (repeat for debug)."),
        click.option(
            "--log-format",
            type=click.Choice(["text", "json"]),
            default=None,
            help="Log line format (default text).",
        ),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


class OneLineErrors(click.Group):
    """Usage errors as one line (`nodeagent: error: ...`, exit 2), like every other
    error, instead of click's usage block."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        kwargs.setdefault("prog_name", "nodeagent")  # also under `python -m nodeagent`
        try:
            code = super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.format_message(), err=True)  # the help, as click prints it
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            ctx = exc.ctx if isinstance(exc, click.UsageError) else None
            hint = f" (see '{ctx.command_path} -h')" if ctx else ""
            fail(exc.format_message() + hint, exc.exit_code)
        except click.Abort:
            fail("interrupted", 130)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(
    cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]}, name="nodeagent"
)
@click.version_option(__version__, "--version", prog_name="nodeagent")
def main() -> None:
    """nodeagent makes a Kubernetes node's departure graceful.

    It cordons and drains the node before it shuts down, reboots or is stopped for
    maintenance, and uncordons it once it is back.
    """


@main.command()
def version() -> None:
    """Print the version."""
    click.echo(f"nodeagent {__version__}")


def _progress_printer() -> Callable[[str], None]:
    start = time.monotonic()

    def emit(message: str) -> None:
        click.echo(f"[{time.monotonic() - start:6.2f}s] {message}", err=True)

    return emit


@main.command()
@common_options
@click.option("--deadline", metavar="DURATION", help="Bound for the whole drain (default 120s).")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option(
    "--force-after-deadline",
    is_flag=True,
    default=None,
    help="At the deadline, delete the pods that are left.",
)
@click.option(
    "--do-not-disrupt-ceiling",
    metavar="DURATION",
    help="How long karpenter.sh/do-not-disrupt pods may finish on their own.",
)
@click.option(
    "--finished-pods",
    metavar="keep|delete",
    help="Succeeded/Failed pods: keep them (default) or delete them as kubectl drain does.",
)
@click.option(
    "--reason",
    default="manual",
    show_default=True,
    type=click.Choice(["manual", "poweroff", "reboot", "stop", "evacuate"]),
    help="Recorded in the node's drain-reason annotation.",
)
@handle_errors
def drain(reason: str, dry_run: bool, **params: Any) -> None:
    """Cordon the node and evict its pods, respecting PodDisruptionBudgets.

    DaemonSet, static and (unless --finished-pods delete) finished pods stay.
    Lowest priority goes first, system-critical pods last. Exits 3 if pods are
    left: the deadline passed, or pods are held on the node by finalizers.
    """
    cfg = build_config(
        params,
        {
            "drain.deadline": params.pop("deadline"),
            "drain.force_after_deadline": params.pop("force_after_deadline"),
            "drain.do_not_disrupt_ceiling": params.pop("do_not_disrupt_ceiling"),
            "drain.finished_pods": params.pop("finished_pods"),
        },
    )
    from nodeagent.drain.engine import Drain, DrainOptions
    from nodeagent.kube.credentials import connect
    from nodeagent.report.events import EventRecorder

    kube, who = connect(cfg)
    options = DrainOptions(
        reason=reason,
        deadline=cfg.drain.deadline,
        do_not_disrupt_ceiling=cfg.drain.do_not_disrupt_ceiling,
        force_after_deadline=cfg.drain.force_after_deadline,
        dry_run=dry_run,
        concurrency=cfg.drain.concurrency,
        finished_pods=cfg.drain.finished_pods,
    )
    events = EventRecorder(kube, cfg.node_name, enabled=not dry_run)
    progress = _progress_printer()
    if dry_run:
        result = Drain(kube, cfg.node_name, options, events, progress).run()
    else:
        from nodeagent.departure.executor import cordon_then_drain
        from nodeagent.drain.phases import Phase, process_age

        def detaching(volumes: Sequence[str]) -> None:
            if volumes:
                progress(f"waiting for {len(volumes)} volume(s) to detach: {', '.join(volumes)}")

        drain = Drain(kube, cfg.node_name, options, events, progress)
        started = process_age()  # up to the drain's first request
        if started is not None:
            drain.result.phases.add(Phase.STARTUP, started)
        # The kubelet's identity may not change its Node's taints (NodeRestriction).
        result = cordon_then_drain(drain, detaching=detaching, taint=not who.is_kubelet)
        with result.phases.timed(Phase.EVENTS):
            flush_events(events)
    from nodeagent.drain.summary import render

    click.echo(render(result))
    sys.exit(int(result.exit_code))


@main.command()
@common_options
@click.option("--force", is_flag=True, help="Uncordon even if someone else cordoned the node.")
@handle_errors
def uncordon(force: bool, **params: Any) -> None:
    """Undo nodeagent's cordon and clear its marker.

    A node cordoned by someone else stays cordoned unless --force (exit 4).
    """
    cfg = build_config(params)
    from nodeagent.fence.marker import get_node
    from nodeagent.fence.marker import uncordon as do_uncordon
    from nodeagent.kube.credentials import connect
    from nodeagent.report.events import EventRecorder

    kube, _ = connect(cfg)
    if do_uncordon(kube, cfg.node_name, force=force):
        events = EventRecorder(kube, cfg.node_name)
        events.node(get_node(kube, cfg.node_name), "Uncordoned", "Uncordoned by nodeagent")
        flush_events(events)
        click.echo(f"node {cfg.node_name} uncordoned")
    else:
        click.echo(f"node {cfg.node_name} was not cordoned")


@main.command()
@common_options
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json is for scripts.",
)
@handle_errors
def status(output: str, **params: Any) -> None:
    """Show the node's cordon, marker, taints, agent conditions and heartbeat,
    and the pods a drain would still evict with the PDBs that block them.
    """
    cfg = build_config(params)
    from nodeagent.agent.status import gather, render
    from nodeagent.kube.credentials import connect

    kube, _ = connect(cfg)
    report = gather(kube, cfg.node_name, cfg.warnings.other_handler)
    if output == "json":
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        click.echo(render(report))


@main.command()
@common_options
@click.option("--pod", "pod_ref", required=True, metavar="NAMESPACE/NAME", help="The pod.")
@click.option("--dry-run", is_flag=True, help="Say what would be stopped, run and removed.")
@handle_errors
def wipe(pod_ref: str, dry_run: bool, **params: Any) -> None:
    """Wipe a pod's node-local state, as the agent does for a pod the kubelet rejected.

    Uses the [rejection] state roots, paths and hooks; bounded by wipe_timeout.
    Reports the StateWiped condition and an Event on the pod (not with --dry-run).
    Exits 0 when wiped, 1 when the wipe failed or timed out.
    """
    cfg = build_config(params)
    check_rejection(cfg)
    namespace, _, name = pod_ref.partition("/")
    if not namespace or not name or "/" in name:
        fail(f"--pod: expected NAMESPACE/NAME, got {pod_ref!r}", 2)
    from nodeagent.kube.client import ApiError, KubeError, pods_path
    from nodeagent.kube.credentials import connect
    from nodeagent.rejection.wipe import PodRef
    from nodeagent.rejection.wipe import wipe as do_wipe

    kube, _ = connect(cfg)
    try:
        pod = kube.get(pods_path(namespace, name))
    except ApiError as exc:
        if exc.status != 404:
            raise
        raise KubeError(f'pod "{pod_ref}" not found') from None
    bound = pod["spec"].get("nodeName") or ""
    if bound != cfg.node_name:
        fail(
            f"pod {pod_ref} is bound to node {bound or '(none)'!r}, not {cfg.node_name!r}: "
            "its node-local state is not here",
            2,
        )
    result = do_wipe(PodRef.of(pod), cfg.rejection, dry_run=dry_run)
    click.echo(f"{'would wipe' if dry_run else result.reason}: {result.message}")
    if not dry_run:
        from nodeagent.rejection.controller import PodGone, report_wipe
        from nodeagent.report.events import EventRecorder

        events = EventRecorder(kube, cfg.node_name)
        try:
            report_wipe(kube, pod, result, events)
        except PodGone:
            fail(f"pod {pod_ref} was deleted during the wipe; nothing reported", 1)
        flush_events(events)
    sys.exit(0 if result.ok else 1)


@main.command()
@common_options
@handle_errors
def run(**params: Any) -> None:
    """Run the agent (the systemd service / DaemonSet entry point).

    Drains the node when it shuts down, reboots or the service is stopped for
    maintenance (per the [shutdown] policy), and uncordons it after boot.
    """
    run_daemon(params)
