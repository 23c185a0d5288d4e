"""Which refusals the client waits out by itself, and for how long.

API Priority and Fairness (APF) answers 429 with a Retry-After when a request's priority
level has no seat and no queue room; the request was not executed and is safe to send
again for every verb. Such 429s are honoured in the client, within the request's
deadline, so no caller counts them as failures.

Not every 429 is APF's: the eviction subresource answers 429 when a PodDisruptionBudget
refuses (a `DisruptionBudget` cause in the Status). Those go back to the drain engine,
which waits for the PDB to change; APF's response headers are set on every request it
classifies, so the cause is what tells the two apart, and it is checked first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PF_HEADERS = ("X-Kubernetes-PF-FlowSchema-UID", "X-Kubernetes-PF-PriorityLevel-UID")
WAIT_CAP = 5.0  # a longer Retry-After is cut to this (the request is retried sooner)
WAIT_MIN = 0.1  # a Retry-After of 0 still waits a moment
WAIT_DEFAULT = 1.0  # when the server names no time (APF's own default)
JITTER = 0.2  # up to this fraction added, so throttled callers do not return in step
MAX_RETRIES = 10  # for a client without a deadline (client-go's limit as well)
MIN_REQUEST_TIME = 0.25  # time a retry needs after its wait to be worth sending


@dataclass(frozen=True)
class Refusal:
    """What a 429 (or any non-2xx) answer says about retrying."""

    status: int
    retry_after: float | None = None  # the Retry-After header
    pf_classified: bool = False  # APF's response headers are present
    reason: str = ""  # the Status reason
    retry_after_seconds: float | None = None  # the Status details.retryAfterSeconds
    budget_cause: bool = False  # a DisruptionBudget cause: a PDB refused an eviction


def refusal(status: int, headers: Any, body: Any) -> Refusal:
    """The Refusal in a response's status, headers (case-insensitive) and decoded body."""
    body = body if isinstance(body, dict) else {}
    details = body.get("details")
    details = details if isinstance(details, dict) else {}
    causes = details.get("causes")
    causes = causes if isinstance(causes, list) else []
    seconds = details.get("retryAfterSeconds")
    return Refusal(
        status=status,
        retry_after=_seconds(headers.get("Retry-After")),
        pf_classified=any(headers.get(h) for h in PF_HEADERS),
        reason=str(body.get("reason") or ""),
        retry_after_seconds=float(seconds) if isinstance(seconds, int | float) else None,
        budget_cause=any(
            isinstance(c, dict) and c.get("reason") == "DisruptionBudget" for c in causes
        ),
    )


def _seconds(value: Any) -> float | None:
    text = str(value or "").strip()
    return float(text) if text.isdigit() else None


def throttled(r: Refusal) -> bool:
    """An APF (or server-side rate limit) 429, not a PDB refusal."""
    if r.status != 429 or r.budget_cause:
        return False
    return r.pf_classified or (r.reason == "TooManyRequests" and r.retry_after_seconds is not None)


def retry_wait(r: Refusal, attempt: int, left: float | None, jitter: float) -> float | None:
    """Seconds to wait before sending the request again, or None to give up.

    `attempt` counts the retries already made; `left` is the time to the request's
    deadline (None: no deadline, then at most MAX_RETRIES); `jitter` is in [0, 1).
    """
    if not throttled(r):
        return None
    asked = r.retry_after if r.retry_after is not None else r.retry_after_seconds
    base = WAIT_DEFAULT if asked is None else min(max(asked, WAIT_MIN), WAIT_CAP)
    wait = base * (1 + JITTER * jitter)
    if left is None:
        return wait if attempt < MAX_RETRIES else None
    return wait if wait + MIN_REQUEST_TIME < left else None
