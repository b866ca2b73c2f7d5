"""Checks on a checkpoint read back from a store, before a registration resumes from it.

A checkpoint store is anything with the `CheckpointStore` methods: the file
store's JSON files can be edited by hand, and a store of the user's own may
hand back whatever it holds. A checkpoint the registration could not have
written must stop it with one line saying which checkpoint and what is wrong,
not resume from a wrong place: an SCN of -1 read `{"scn": 0}`, the whole log
again, in silence; an offset of -5 was reported as "retention removed the log
below offset 0"; a bootstrap position that is not JSON came out as the JSON
parser's "Expecting value: line 1 column 1 (char 0)". Pure: no I/O.
"""

from __future__ import annotations

import json

from sdk.bootstrap import BootstrapPosition
from sdk.stores.records import Checkpoint

_HINT = "remove that checkpoint to start over"


def checked_position(checkpoint: Checkpoint) -> BootstrapPosition | None:
    """The bootstrap position a checkpoint holds (None: it was saved online).

    Raises:
        ValueError: the offset or SCN is negative (or not an int), or the
            bootstrap position is not the JSON of a `BootstrapPosition`; the
            message names the checkpoint.
    """
    where = (f"the checkpoint of {checkpoint.consumer_group!r} on "
             f"{checkpoint.topic}/{checkpoint.partition}")
    for name in ("offset", "scn"):
        value = getattr(checkpoint, name)
        if type(value) is not int or value < 0:
            raise ValueError(f"{where} is invalid: {name} {value!r}, need an int >= 0; {_HINT}")
    if not checkpoint.bootstrap:
        return None
    try:
        data = json.loads(checkpoint.bootstrap)
    except (TypeError, ValueError):
        data = None
    if not isinstance(data, dict):
        raise ValueError(f"{where} is invalid: its bootstrap position "
                         f"{checkpoint.bootstrap!r:.80} is not a JSON object; {_HINT}")
    lacking = [name for name in ("phase", "snapshot_offset") if name not in data]
    if lacking:
        raise ValueError(f"{where} is invalid: its bootstrap position {data!r:.80} lacks "
                         f"{', '.join(lacking)}; {_HINT}")
    try:
        position = BootstrapPosition.from_dict(data)
    except ValueError as e:
        raise ValueError(f"{where} is invalid: {e}; {_HINT}") from None
    problem = _position_problem(position)
    if problem:
        raise ValueError(f"{where} is invalid: its bootstrap position {problem}; {_HINT}")
    return position


def _position_problem(position: BootstrapPosition) -> str:
    """What in a parsed position the broker's resume could not take ("" = nothing):
    unchecked, a negative offset or a list as the key failed deep in the
    reader with a traceback ("Value out of range: -3")."""
    for name in ("snapshot_offset", "next_offset", "target_offset"):
        value = getattr(position, name)
        if not 0 <= value < 1 << 64:
            return f"has {name} {value}, need 0..2**64-1"
    if position.source is not None and type(position.source) is not str:
        return f"has source {position.source!r}, need a string"
    key = position.key
    if key is not None and not (type(key) is str or (type(key) is int
                                                     and -(1 << 63) <= key < 1 << 63)):
        return f"has key {key!r}, need a string or an int64"
    return ""


def ahead_of_log(checkpoint: Checkpoint, log_end: int) -> bool:
    """Whether the checkpoint's window lies past the log's end (`log_end`: the
    next offset to be written): written against another log, such as a topic
    deleted and created again, which starts its offsets and SCNs over, or a
    broker that has not yet copied so far (a relay follower behind)."""
    return not checkpoint.bootstrap and checkpoint.offset >= log_end


def is_other_incarnation(checkpoint: Checkpoint, topic_incarnation: str) -> bool:
    """Whether the checkpoint is of another incarnation of the topic than
    `topic_incarnation` (DescribeTopic's): both known and different. The topic
    was deleted and created again under the same name since the checkpoint was
    written (a store other than the broker's keeps checkpoints across that); its
    offset and SCN name no event of the new log, whatever that log's length.
    "" on either side (a checkpoint written before incarnations were kept, a
    broker that does not name them) is not judged: it resumes as before."""
    return bool(checkpoint.incarnation and topic_incarnation
                and checkpoint.incarnation != topic_incarnation)


def other_incarnation_problem(checkpoint: Checkpoint, topic_incarnation: str, log_start: int,
                              log_end: int) -> str:
    """What is wrong with a checkpoint of another incarnation, in one line naming
    both incarnations and what the new log holds (for the WARNING and the error)."""
    held = (f"empty, its next offset {log_end}" if log_start >= log_end
            else f"holding offsets {log_start}..{log_end - 1}")
    return (f"the checkpoint of {checkpoint.consumer_group!r} on "
            f"{checkpoint.topic}/{checkpoint.partition} (offset {checkpoint.offset}, scn "
            f"{checkpoint.scn}) is of incarnation {checkpoint.incarnation!r} of the topic, which "
            f"was deleted and created again: it is now incarnation {topic_incarnation!r} "
            f"({held}); resuming after the checkpoint would skip the new topic's windows up to "
            f"scn {checkpoint.scn} unseen")
