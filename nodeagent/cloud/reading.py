"""A reading of the cloud's warnings, item by item: all or nothing per item.

An item is one thing the metadata endpoint says, read and judged on its own: AWS's Spot
notice, its rebalance recommendation, its Auto Scaling target state, its list of
scheduled events and each event in that list; Azure's list of scheduled events and each
event in it; GCP's maintenance-event and preempted keys.

A reader hands the watcher one `Item` per item it read: the notices it says stand
(none: the item says nothing is coming), or the doubt that kept it from being believed
(no answer, an error status, a body or a value outside the contract, a time far off).
`merge` keeps each item's last believed notices: a doubted item changes nothing, whether
a warning stood or nothing did, so a bad reading neither ends a warning nor starts one.
Only a believed answer that says so ends a warning: a 404 where the contract says 404
means none, a State canceled or completed, the event gone from a well-formed list, a key
back to NONE or FALSE.

A list (AWS's scheduled events, Azure's events) is an item of its own whose entries
follow it as items keyed ``<list>/<event ID>``: a list believed ends the entries it no
longer names; an entry doubted in a believed list keeps its own last believed state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from nodeagent.cloud.http import Error, MetadataError
from nodeagent.types import Notice

State = Mapping[str, tuple[Notice, ...]]


@dataclass(frozen=True)
class Item:
    """One item of one reading."""

    key: str  # "spot", "scheduled", "scheduled/instance-event-1", "events/<EventId>"
    notices: tuple[Notice, ...] = ()
    doubt: MetadataError | None = None  # not believed, and why
    # A list: the keys of the entries it names (they follow as items of their own).
    entries: tuple[str, ...] | None = None

    @property
    def believed(self) -> bool:
        return self.doubt is None


def read_item(key: str, read: Callable[[], Iterable[Notice]]) -> Item:
    """`read()`'s notices as a believed item, or the MetadataError it raised as a doubt."""
    try:
        return Item(key, tuple(read()))
    except MetadataError as exc:
        return Item(key, doubt=exc)


def dated(item: Item, first_seen: dict[str, float], now: float) -> Item:
    """`item` with each notice dated from its event's first sighting (kept in
    `first_seen`): for events whose endpoint says nothing of when they were announced."""
    notices = tuple(
        dataclasses.replace(n, since=first_seen.setdefault(n.event_id, now)) for n in item.notices
    )
    return dataclasses.replace(item, notices=notices)


def doubted(item: Item, doubt: MetadataError) -> Item:
    return Item(item.key, doubt=doubt, entries=item.entries)


def entry_key(listing: str, event_id: str) -> str:
    return f"{listing}/{event_id}"


def merge(state: State, reading: Iterable[Item]) -> dict[str, tuple[Notice, ...]]:
    """Each item's notices after `reading`: the believed items' new ones, the doubted
    items' last believed ones (or none, for an item never believed)."""
    new = dict(state)
    for item in reading:
        if not item.believed:
            continue
        if item.entries is not None:  # a believed list: what it no longer names is gone
            prefix = f"{item.key}/"
            for key in [k for k in new if k.startswith(prefix) and k not in item.entries]:
                del new[key]
        new[item.key] = item.notices
    return new


def standing(state: State) -> tuple[Notice, ...]:
    """Every item's notices, in a stable order."""
    return tuple(n for key in sorted(state) for n in state[key])


Doubting = Mapping[str, Error]  # item -> the kind of its doubts in the streak


def streaks(doubting: Doubting, reading: Iterable[Item]) -> tuple[Doubting, list[Item], list[str]]:
    """The items doubting after `reading`, the doubts starting a streak, the items ending
    one. A streak is the run of doubts of one kind of one item (one line and one count
    each): a believed reading of the item ends it, a doubt of another kind starts the
    next. An entry its list no longer names ends its streak unsaid."""
    now = dict(doubting)
    started: list[Item] = []
    ended: list[str] = []
    for item in reading:
        if item.entries is not None and item.believed:
            prefix = f"{item.key}/"
            for key in [k for k in now if k.startswith(prefix) and k not in item.entries]:
                del now[key]
        if item.doubt is not None and now.get(item.key) is not item.doubt.error:
            now[item.key] = item.doubt.error
            started.append(item)
        elif item.believed and item.key in now:
            del now[item.key]
            ended.append(item.key)
    return now, started, ended


class Standing:
    """What the endpoint's items last said when believed, and which items doubt."""

    def __init__(self, items: tuple[str, ...]) -> None:
        self._items = frozenset(items)
        self._state: dict[str, tuple[Notice, ...]] = {}
        self._doubting: Doubting = {}

    def take(self, reading: list[Item]) -> tuple[list[Item], list[str]]:
        """Take in `reading`; return the doubts starting a streak and the items ending one."""
        self._state = merge(self._state, reading)
        self._doubting, started, ended = streaks(self._doubting, reading)
        return started, ended

    def known(self) -> bool:
        """Every item was believed once: what stands can be handed on."""
        return self._items <= self._state.keys()

    def notices(self) -> tuple[Notice, ...]:
        return standing(self._state)
