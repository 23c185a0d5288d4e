"""Which 429s the client waits out (nodeagent/kube/throttle.py), as a table."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.kube.throttle import (
    MAX_RETRIES,
    WAIT_CAP,
    Refusal,
    refusal,
    retry_wait,
    throttled,
)

PF = {"X-Kubernetes-PF-FlowSchema-UID": "f", "X-Kubernetes-PF-PriorityLevel-UID": "p"}
PDB_BODY = {
    "kind": "Status",
    "reason": "TooManyRequests",
    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
    "details": {
        "causes": [{"reason": "DisruptionBudget", "message": "The disruption budget b needs 1"}],
        "retryAfterSeconds": 10,
    },
}
STATUS_BODY = {"kind": "Status", "reason": "TooManyRequests", "details": {"retryAfterSeconds": 2}}


class Headers(dict[str, str]):
    """Case-insensitive, as urllib3's are."""

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self.items():
            if k.lower() == key.lower():
                return v
        return default


@pytest.mark.parametrize(
    ("status", "headers", "body", "retried"),
    [
        # APF: its headers and a plain-text body ("Too many requests, please try again later.")
        (429, {**PF, "Retry-After": "1"}, None, True),
        (429, {"x-kubernetes-pf-prioritylevel-uid": "p", "retry-after": "3"}, None, True),
        # a Status saying so, without APF's headers
        (429, {"Retry-After": "2"}, STATUS_BODY, True),
        # the eviction refused by a PDB: the drain engine's, even with APF's headers
        (429, {**PF, "Retry-After": "10"}, PDB_BODY, False),
        (429, {"Retry-After": "10"}, PDB_BODY, False),
        # a 429 from nobody we know (no headers, no Status): not ours to wait out
        (429, {}, None, False),
        (429, {}, {"reason": "TooManyRequests"}, False),
        # not a 429
        (503, {**PF, "Retry-After": "1"}, None, False),
        (409, PF, {"reason": "Conflict"}, False),
        (500, PF, None, False),
    ],
)
def test_which_refusals_are_waited_out(
    status: int, headers: dict[str, str], body: Any, retried: bool
) -> None:
    r = refusal(status, Headers(headers), body)
    assert throttled(r) is retried
    assert (retry_wait(r, 0, None, 0.0) is not None) is retried
    assert (retry_wait(r, 0, 30.0, 0.0) is not None) is retried


APF = Refusal(429, retry_after=1.0, pf_classified=True)


@pytest.mark.parametrize(
    ("r", "attempt", "left", "jitter", "wait"),
    [
        (APF, 0, None, 0.0, 1.0),
        (APF, 0, None, 0.5, 1.1),  # jittered upwards only: never sooner than asked
        (Refusal(429, retry_after=None, pf_classified=True), 0, None, 0.0, 1.0),
        (Refusal(429, retry_after=60.0, pf_classified=True), 0, None, 0.0, WAIT_CAP),
        (Refusal(429, retry_after=0.0, pf_classified=True), 0, None, 0.0, 0.1),
        (Refusal(429, reason="TooManyRequests", retry_after_seconds=2), 0, None, 0.0, 2.0),
        # no deadline: a bounded number of retries
        (APF, MAX_RETRIES - 1, None, 0.0, 1.0),
        (APF, MAX_RETRIES, None, 0.0, None),
        # a deadline: as many as fit, each leaving time for the request itself
        (APF, MAX_RETRIES + 5, 10.0, 0.0, 1.0),
        (APF, 0, 1.3, 0.0, 1.0),
        (APF, 0, 1.2, 0.0, None),
        (APF, 0, 0.5, 0.0, None),
    ],
)
def test_how_long_to_wait(
    r: Refusal, attempt: int, left: float | None, jitter: float, wait: float | None
) -> None:
    got = retry_wait(r, attempt, left, jitter)
    assert got == pytest.approx(wait) if wait is not None else got is None
