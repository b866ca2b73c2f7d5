"""The error catalogue: every error a client can get, as data.

Each entry has a name, a gRPC status code and a message template that says
what was wrong and what is allowed (NATS keeps its errors the same way).
Cores and the partition task raise `BrokerError`; the RPC shell maps it to a
status once (`broker/rpc/status.py`). A `BrokerError` is the client's fault
or a state the client must react to; a bug is an `AssertionError`.

A status message travels in the grpc-message header, and gRPC drops a reply
whose headers pass 8 KiB (at random) or 16 KiB (always) for "Stream removed":
the client would lose the message that says what it did wrong. So a name a
client sent, quoted with `!r` in a template, is quoted by `quote` (at most
`QUOTE_CHARS_MAX` characters of it), and every message is cut at
`MESSAGE_BYTES_MAX` bytes as a last guard (gRPC percent-encodes the bytes of
non-ASCII text, so 2 KiB of text is at most 6 KiB on the wire).
"""

from __future__ import annotations

import functools
import string
from dataclasses import dataclass
from typing import Any

import grpc

from sdk.core.names import is_name

# Characters of one client string that a message quotes; the rest is counted.
QUOTE_CHARS_MAX = 64
# UTF-8 bytes of one status message: well under gRPC's 8 KiB header limit.
MESSAGE_BYTES_MAX = 2048
# A valid name (names.py) this long or shorter is given whole in a plain field.
NAME_WHOLE_MAX = 255


@dataclass(frozen=True, slots=True)
class ErrorKind:
    name: str
    code: grpc.StatusCode
    template: str


CATALOGUE: dict[str, ErrorKind] = {
    k.name: k
    for k in [
        ErrorKind("topic_not_found", grpc.StatusCode.NOT_FOUND,
                  "topic {topic!r} does not exist; create it first (keybus topics create {topic})"),
        ErrorKind("topic_name_missing", grpc.StatusCode.INVALID_ARGUMENT,
                  "the request names no topic (its topic field is empty); give a topic "
                  "name (keybus topics list shows the topics)"),
        ErrorKind("topic_not_found_to_delete", grpc.StatusCode.NOT_FOUND,
                  "topic {topic!r} does not exist, so there is nothing to delete "
                  "(keybus topics list shows the topics)"),
        ErrorKind("topic_exists", grpc.StatusCode.ALREADY_EXISTS,
                  "topic {topic!r} already exists"),
        ErrorKind("topic_delete_slow", grpc.StatusCode.UNAVAILABLE,
                  "deleting topic {topic!r} takes longer than {waited_ms} ms (it waits for "
                  "{step}); the delete goes on in the broker: the topic is refused as not "
                  "existing already, and asking to delete it again waits for the same delete"),
        ErrorKind("topic_being_deleted", grpc.StatusCode.UNAVAILABLE,
                  "topic {topic!r} is still being deleted (it waits for {step}); create it "
                  "again once the delete is done"),
        ErrorKind("topic_name_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "topic name {topic!r} is invalid: use 1..{max} characters from "
                  "[A-Za-z0-9._-]"),
        ErrorKind("partitions_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "partitions={value} is out of range; allowed 1..{max} (the broker's "
                  "partitions_max)"),
        ErrorKind("retention_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "{field}={value} is invalid; allowed {allowed}"),
        ErrorKind("partition_out_of_range", grpc.StatusCode.INVALID_ARGUMENT,
                  "partition={partition} is out of range for topic {topic!r}; "
                  "allowed 0..{last}"),
        ErrorKind("batch_invalid", grpc.StatusCode.INVALID_ARGUMENT, "{detail}"),
        ErrorKind("request_too_large", grpc.StatusCode.INVALID_ARGUMENT,
                  "{field}={value} is over the limit of {max}"),
        ErrorKind("scn_too_large", grpc.StatusCode.INVALID_ARGUMENT,
                  "scn={scn} is over the limit of {max} for a supplied SCN (a signed 64-bit "
                  "integer, as Databus's SCNs are); allowed 1..{max}, or 0 for the next one"),
        ErrorKind("scns_exhausted", grpc.StatusCode.FAILED_PRECONDITION,
                  "{topic!r}/{partition} has no SCNs left for {count} more event(s): its last "
                  "SCN is {last_scn} and an SCN is at most {max}"),
        ErrorKind("scn_not_increasing", grpc.StatusCode.FAILED_PRECONDITION,
                  "scn={scn} is not greater than the last SCN {last_scn} of "
                  "{topic!r}/{partition}; a supplied SCN must increase (a re-sent window "
                  "is refused and stores nothing)"),
        ErrorKind("sequence_gap", grpc.StatusCode.FAILED_PRECONDITION,
                  "sequence={sequence} of producer {producer_id} on {topic!r}/{partition} "
                  "skips ahead; expected sequence {expected}"),
        ErrorKind("sequence_too_old", grpc.StatusCode.FAILED_PRECONDITION,
                  "sequence={sequence} of producer {producer_id} on {topic!r}/{partition} is "
                  "older than the {kept} results the broker keeps; its outcome is unknown"),
        ErrorKind("producer_id_conflict", grpc.StatusCode.FAILED_PRECONDITION,
                  "sequence={sequence} of producer {producer_id} on {topic!r}/{partition} was "
                  "stored at offset {offset} with other events: another producer is using "
                  "this producer id (a chosen id must be used by one producer at a time); "
                  "this request was not stored"),
        ErrorKind("producer_unknown", grpc.StatusCode.FAILED_PRECONDITION,
                  "producer_id={producer_id} is unknown on {topic!r}/{partition} and "
                  "sequence={sequence} is not 0; call InitProducer"),
        ErrorKind("offset_past_end", grpc.StatusCode.OUT_OF_RANGE,
                  "start offset {offset} of {topic}/{partition} is past the end: {held}; "
                  "allowed {start}..{end} (the end waits for the next event), or earliest, "
                  "latest, scn:N"),
        # what: "start offset N of T/P was", or "offsets N..M of T/P, which this read had
        # reached, were" (removed while a read went on: broker/read_path.py)
        ErrorKind("offset_before_start", grpc.StatusCode.OUT_OF_RANGE,
                  "{what} removed by retention: {held}; allowed {start}..{end}, or earliest, "
                  "latest, scn:N"),
        ErrorKind("start_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "start is not set; allowed: earliest, latest, offset or scn"),
        ErrorKind("read_other_incarnation", grpc.StatusCode.FAILED_PRECONDITION,
                  "this read of {topic!r}/{partition} from {start} is of incarnation "
                  "{expected!r} of the topic, which was deleted and created again (it is now "
                  "incarnation {current!r}): its position names no event of this log, so "
                  "nothing was sent; read the new topic from a start of its own (earliest, latest, "
                  "an offset of it) with a new reader"),
        # position: "a new snapshot", "the snapshot as of offset 60", "the catch-up at
        # offset 70", "online at offset 90" (broker/rpc/bootstrap_servicer.resume_words)
        ErrorKind("bootstrap_other_incarnation", grpc.StatusCode.FAILED_PRECONDITION,
                  "this bootstrap of {topic!r}/{partition} ({position}) is of incarnation "
                  "{expected!r} of the topic, which was deleted and created again (it is now "
                  "incarnation {current!r}): its snapshot and offsets are of the old topic, so "
                  "nothing was sent; drop the state built from the old topic and bootstrap the "
                  "new one from a new snapshot (start='bootstrap', no saved position) with a "
                  "new reader"),
        ErrorKind("read_limit_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "{field}={value} is over the broker limit of {max}; allowed 0 (broker "
                  "default) or 1..{max}"),
        ErrorKind("hash_range_invalid", grpc.StatusCode.INVALID_ARGUMENT, "{detail}"),
        ErrorKind("filter_invalid", grpc.StatusCode.INVALID_ARGUMENT, "{detail}"),
        ErrorKind("queue_full", grpc.StatusCode.RESOURCE_EXHAUSTED,
                  "{what} is full ({max} requests); retry later"),
        ErrorKind("unknown_field", grpc.StatusCode.INVALID_ARGUMENT,
                  "{message} has unknown field number {number} (an option this broker does "
                  "not support); allowed fields: {allowed}"),
        ErrorKind("shutting_down", grpc.StatusCode.UNAVAILABLE,
                  "the broker is shutting down; retry on another broker or later"),
        ErrorKind("store_failed", grpc.StatusCode.UNAVAILABLE,
                  "the broker's storage failed ({cause}): it stores nothing more and is "
                  "stopping; what it acknowledged is kept, what it did not may or may not "
                  "be: retry on another broker or once it is started again (an idempotent "
                  "producer stores nothing twice)"),
        ErrorKind("store_unreadable", grpc.StatusCode.DATA_LOSS,
                  "{what} cannot be read: the broker's store is damaged there ({cause}); what "
                  "lies before it can be read, nothing from there on until the data "
                  "directory is restored from a follower or a backup"),
        ErrorKind("topic_deleted", grpc.StatusCode.NOT_FOUND,
                  "topic {topic!r} was deleted"),
        # ------------------------------------------------------------ security and hardening
        ErrorKind("request_undecodable", grpc.StatusCode.INVALID_ARGUMENT,
                  "the {size}-byte request is not a valid keybus.v1.{message} ({detail}); send "
                  "the message proto/keybus.proto defines for this method"),
        ErrorKind("request_over_limit", grpc.StatusCode.RESOURCE_EXHAUSTED,
                  "the {message} of {size} bytes is over the broker's limit of {max} bytes "
                  "(request_bytes_max); send smaller batches"),
        ErrorKind("unauthenticated", grpc.StatusCode.UNAUTHENTICATED, "{detail}"),
        ErrorKind("permission_denied", grpc.StatusCode.PERMISSION_DENIED, "{detail}"),
        ErrorKind("grant_invalid", grpc.StatusCode.INVALID_ARGUMENT, "{detail}"),
        ErrorKind("producer_not_issued", grpc.StatusCode.INVALID_ARGUMENT,
                  "producer_id={producer_id} was never given by InitProducer; call InitProducer, "
                  "or choose a stable id with the high bit set (2^63 <= id < 2^64)"),
        ErrorKind("slots_mismatch", grpc.StatusCode.INVALID_ARGUMENT,
                  "batch.slots: event {index} has slot {sent} but its ordering key {key!r} "
                  "hashes to slot {slot}; send the slots of the shared rule (sdk.core.hashing) "
                  "or leave the column empty and the broker computes them"),
        # ------------------------------------------------------------ subscriptions
        ErrorKind("subscribe_open_missing", grpc.StatusCode.INVALID_ARGUMENT,
                  "the first message of a Subscribe stream must be `open`; got {got}"),
        ErrorKind("subscribe_open_twice", grpc.StatusCode.INVALID_ARGUMENT,
                  "`open` was sent twice on one Subscribe stream; open a new stream "
                  "for another subscription"),
        ErrorKind("subscription_name_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "{field} {value!r} is invalid: use 1..{max} characters from [A-Za-z0-9._-]"),
        ErrorKind("subscription_not_found", grpc.StatusCode.NOT_FOUND,
                  "subscription {subscription!r} does not exist on topic {topic!r}; it is "
                  "created by the first consumer that subscribes"),
        ErrorKind("subscription_type_mismatch", grpc.StatusCode.FAILED_PRECONDITION,
                  "subscription {subscription!r} on topic {topic!r} is {existing}; consumer "
                  "{consumer!r} asked for {asked}. Subscribe with {existing}, or delete the "
                  "subscription first (keybus subscriptions delete {topic} {subscription})"),
        ErrorKind("subscription_setting_mismatch", grpc.StatusCode.FAILED_PRECONDITION,
                  "subscription {subscription!r} on topic {topic!r} has {field}={existing}; "
                  "consumer {consumer!r} asked for {asked}. It is fixed when the subscription "
                  "is created: use the same value (or leave it unset)"),
        ErrorKind("exclusive_consumer_busy", grpc.StatusCode.FAILED_PRECONDITION,
                  "subscription {subscription!r} on topic {topic!r} is Exclusive and consumer "
                  "{holder!r} is attached; a second consumer ({consumer!r}) is refused. Use "
                  "type shared, failover or key_shared for several consumers"),
        ErrorKind("consumer_name_taken", grpc.StatusCode.ALREADY_EXISTS,
                  "consumer {consumer!r} is already attached to subscription {subscription!r} "
                  "on topic {topic!r}; consumer names are unique per subscription"),
        ErrorKind("dead_letter_topic_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "dead_letter_topic={topic!r} is invalid: use 1..{max} characters from "
                  "[A-Za-z0-9._-]"),
        ErrorKind("dead_letter_topic_is_topic", grpc.StatusCode.INVALID_ARGUMENT,
                  "dead_letter_topic={topic!r} is the subscribed topic: an event dead-lettered "
                  "there would reach subscription {subscription!r} again, without end; name "
                  "another topic, or leave it empty for <topic>-<subscription>-DLQ"),
        ErrorKind("dead_letter_cycle", grpc.StatusCode.FAILED_PRECONDITION,
                  "subscription {subscription!r} on topic {topic!r} would close a dead-letter "
                  "cycle: {cycle}; an event dead-lettered along it would come back to "
                  "{topic!r} and grow every topic of the cycle without end. Name a "
                  "dead_letter_topic no dead-letter chain leads back from (empty means "
                  "<topic>-<subscription>-DLQ), or first delete a subscription of the cycle "
                  "(keybus subscriptions delete TOPIC SUBSCRIPTION)"),
        ErrorKind("dead_letter_default_too_long", grpc.StatusCode.INVALID_ARGUMENT,
                  "the default dead-letter topic name <topic>-<subscription>-DLQ would be "
                  "{size} characters, over the limit of {max} (topic_name_bytes_max); name "
                  "a shorter one with dead_letter_topic"),
        ErrorKind("sticky_range_conflict", grpc.StatusCode.FAILED_PRECONDITION, "{detail}"),
        ErrorKind("key_shared_refused", grpc.StatusCode.INVALID_ARGUMENT, "{detail}"),
        ErrorKind("subscribe_limit_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "{field}={value} is out of range; allowed {allowed}"),
        ErrorKind("permits_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "permits for partition {partition}: {detail}"),
        ErrorKind("partition_not_subscribed", grpc.StatusCode.INVALID_ARGUMENT,
                  "{what} names partition {partition}, which this stream did not subscribe "
                  "to; subscribed: {subscribed}"),
        ErrorKind("ack_invalid", grpc.StatusCode.INVALID_ARGUMENT, "{what}: {detail}"),
        ErrorKind("too_many_consumers", grpc.StatusCode.RESOURCE_EXHAUSTED,
                  "subscription {subscription!r} on topic {topic!r} has {count} consumers, the "
                  "limit (consumers_per_subscription_max={max}); retry later"),
        ErrorKind("too_many_subscriptions", grpc.StatusCode.RESOURCE_EXHAUSTED,
                  "topic {topic!r} has {count} subscriptions, the limit "
                  "(subscriptions_per_topic_max={max}); delete unused ones"),
        ErrorKind("consumer_outbox_full", grpc.StatusCode.RESOURCE_EXHAUSTED,
                  "consumer {consumer!r} does not read its stream: {max} messages wait to be "
                  "sent; it was disconnected"),
        ErrorKind("subscription_has_consumers", grpc.StatusCode.FAILED_PRECONDITION,
                  "subscription {subscription!r} on topic {topic!r} has {count} attached "
                  "consumer(s); stop them first, or delete it anyway with --force "
                  "(force=True in the SDK), which ends their streams"),
        ErrorKind("subscription_deleted", grpc.StatusCode.NOT_FOUND,
                  "subscription {subscription!r} on topic {topic!r} was deleted"),
        ErrorKind("seek_failed", grpc.StatusCode.UNAVAILABLE,
                  "the seek of subscription {subscription!r} on topic {topic!r} was not "
                  "applied: writing its cursors failed ({cause}); delivery goes on from where "
                  "it was: retry"),
        # ------------------------------------------------------------ relay chaining, election
        ErrorKind("not_leader", grpc.StatusCode.FAILED_PRECONDITION,
                  "broker {broker} is not the leader of topic {topic!r}; the leader is {leader}. "
                  "Produce there, or give the SDK every broker (\"h1:6650,h2:6650,h3:6650\") "
                  "and it follows the leader"),
        ErrorKind("leader_unknown", grpc.StatusCode.UNAVAILABLE,
                  "topic {topic!r} has no leader right now ({detail}); retry shortly"),
        ErrorKind("leadership_unconfirmed", grpc.StatusCode.UNAVAILABLE,
                  "broker {broker} lost its ZooKeeper connection and cannot confirm that it still "
                  "leads topic {topic!r}; nothing is acknowledged until it can (retry)"),
        ErrorKind("leadership_lost", grpc.StatusCode.UNAVAILABLE,
                  "broker {broker} stopped leading topic {topic!r} before the events up to "
                  "offset {offset} were acknowledged; they may or may not survive: retry "
                  "(an idempotent producer stores nothing twice)"),
        ErrorKind("acks_timeout", grpc.StatusCode.UNAVAILABLE,
                  "{have} of the {copies} follower copies of {topic!r}/{partition} up to offset "
                  "{offset} arrived within acks_timeout_ms={timeout}; the events are on the "
                  "leader and a retry is answered once they are copied"),
        ErrorKind("followers_missing", grpc.StatusCode.UNAVAILABLE,
                  "topic {topic!r} has acks={copies}, so {copies} follower(s) must copy each "
                  "event from its leader {broker}, but {following} follow it now; nothing of "
                  "this produce to partition {partition} was stored. Retry once enough "
                  "followers copy (keybus cluster status --broker {broker} shows them), or "
                  "lower the topic's acks"),
        ErrorKind("replica_invalid", grpc.StatusCode.INVALID_ARGUMENT, "{detail}"),
        ErrorKind("log_truncated", grpc.StatusCode.OUT_OF_RANGE,
                  "the log of {topic!r}/{partition} was truncated to offset {cut} while this "
                  "stream read on to offset {offset}: the dropped events were never "
                  "acknowledged and other events may take their offsets; read again from "
                  "offset {cut}"),
        # ------------------------------------------------------------ compacted view, bootstrap
        ErrorKind("view_off", grpc.StatusCode.FAILED_PRECONDITION,
                  "topic {topic!r} keeps no compacted view, so it cannot bootstrap; create "
                  "topics that need it with view on (keybus topics create {topic} --view)"),
        ErrorKind("view_config_invalid", grpc.StatusCode.INVALID_ARGUMENT, "{detail}"),
        ErrorKind("bootstrap_resume_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "resume.{field}={value} is invalid for {topic!r}/{partition}: {allowed}"),
        ErrorKind("bootstrap_snapshot_gone", grpc.StatusCode.OUT_OF_RANGE,
                  "the snapshot of {topic!r}/{partition} at offset {offset} cannot be "
                  "resumed: its catch-up was removed by retention (the log starts at "
                  "{start}); start the bootstrap over"),
        ErrorKind("view_loading", grpc.StatusCode.UNAVAILABLE,
                  "the compacted view of {topic!r}/{partition} on this follower is being "
                  "loaded from {source}: this broker's copy of the log restarted at offset "
                  "{start}, past offsets the upstream's retention removed before they were "
                  "copied, so a view folded from it would miss keys; retry in a while, or "
                  "bootstrap from the leader"),
        ErrorKind("view_rebuilding", grpc.StatusCode.UNAVAILABLE,
                  "the compacted view of {topic!r}/{partition} is being folded again from "
                  "this broker's log ({why}){failing}; retry in a while"),
        ErrorKind("view_incomplete", grpc.StatusCode.UNAVAILABLE,
                  "the compacted view of {topic!r}/{partition} on this broker lacks every key "
                  "written only below offset {below}: this broker's log starts there (the "
                  "offsets below were removed by retention before it copied them), and its view "
                  "was folded from that log, not loaded from its upstream's (it took the "
                  "topic over, or stopped following it, while it waited for that load), so "
                  "a snapshot from it would silently miss those keys; bootstrap from a "
                  "broker whose view is complete (e.g. the old leader, once it leads again), "
                  "or ask for it anyway with allow_incomplete_view (the snapshot's marker "
                  "then says keys_missing_below={below})"),
        ErrorKind("too_many_bootstraps", grpc.StatusCode.RESOURCE_EXHAUSTED,
                  "the broker serves {max} Bootstrap streams in their snapshot or "
                  "catch-up at once (bootstrap_streams_max); retry later"),
        ErrorKind("bootstrap_sources_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "sources: {detail}"),
        # ------------------------------------------------------------ event processor stores
        ErrorKind("processor_name_invalid", grpc.StatusCode.INVALID_ARGUMENT,
                  "{field}={value!r} is invalid: {allowed}"),
        ErrorKind("claims_invalid", grpc.StatusCode.INVALID_ARGUMENT, "{detail}"),
        ErrorKind("checkpoint_invalid", grpc.StatusCode.INVALID_ARGUMENT, "{detail}"),
        ErrorKind("checkpoint_other_incarnation", grpc.StatusCode.FAILED_PRECONDITION,
                  "checkpoint offset {offset} of {topic!r}/{partition} is of incarnation "
                  "{written!r} of the topic, which was deleted and created again (it is now "
                  "incarnation {current!r}): the offset names no event of this log; nothing "
                  "was written (the processor reads the topic again and starts it anew)"),
        ErrorKind("checkpoint_fenced", grpc.StatusCode.FAILED_PRECONDITION,
                  "ownership epoch {epoch} of {topic!r}/{partition} in group {group!r} is "
                  "older than epoch {current} of the current owner {owner!r}: this processor "
                  "lost the partition and must stop processing it (nothing was written)"),
        ErrorKind("epoch_unregistered", grpc.StatusCode.FAILED_PRECONDITION,
                  "ownership epoch {epoch} of {topic!r}/{partition} in group {group!r} was never "
                  "registered (the highest is {current}); claim the partition in this broker's "
                  "ownership store or call FenceCheckpoints first, or write epoch 0 (unfenced)"),
        ErrorKind("epoch_taken", grpc.StatusCode.FAILED_PRECONDITION,
                  "ownership epoch {epoch} of {topic!r}/{partition} in group {group!r} is "
                  "registered to owner {owner!r}, not {asked!r}; an epoch has one owner"),
        # ------------------------------------------------------------ task supervision
        ErrorKind("partition_failed", grpc.StatusCode.UNAVAILABLE,
                  "partition {topic!r}/{partition} stopped on an unexpected error ({cause}); "
                  "requests in flight may or may not have been stored, and the broker reopens "
                  "the partition in {retry_ms} ms: retry (an idempotent producer stores "
                  "nothing twice)"),
        ErrorKind("call_failed", grpc.StatusCode.INTERNAL,
                  "{method} failed on the broker on an unexpected error ({cause}); the "
                  "broker logged it with its trace: retry, and report it if it keeps failing"),
        ErrorKind("task_failed", grpc.StatusCode.UNAVAILABLE,
                  "{what} stopped on an unexpected error ({cause}); requests in flight may or "
                  "may not have been applied, and the broker restarts it in {retry_ms} ms: retry"),
    ]
}


# What a stopped partition answers (deleted, or the broker stopping): its readers end.
PARTITION_CLOSED = frozenset({"topic_deleted", "shutting_down"})


def quote(value: str | bytes, chars_max: int = QUOTE_CHARS_MAX) -> str:
    """`repr(value)`, shortened past `chars_max` characters (or bytes) to its
    first ones, "…" and the length: a client may send a 10,000-character name,
    and a message that echoes it whole is lost (see the module docstring)."""
    if len(value) <= chars_max:
        return repr(value)
    head = repr(value[:chars_max])
    unit = "characters" if isinstance(value, str) else "bytes"
    return f"{head[:-1]}…{head[-1]} ({len(value):,} {unit})"


class _Quoted:
    """A long client string in a template: `!r` gives `quote(value)`, a plain
    field the same shortened text without the quotes, except a valid name: a
    plain field stands where a message gives a command to copy (`keybus topics
    create {topic}`), and a name of at most NAME_WHOLE_MAX characters of
    [A-Za-z0-9._-] cannot make the message too large for its header."""

    __slots__ = ("value",)

    def __init__(self, value: str | bytes) -> None:
        self.value = value

    def __repr__(self) -> str:
        return quote(self.value)

    def __str__(self) -> str:
        if isinstance(self.value, bytes):
            return quote(self.value)
        if is_name(self.value, NAME_WHOLE_MAX):
            return self.value
        return f"{self.value[:QUOTE_CHARS_MAX]}… ({len(self.value):,} characters)"


@functools.cache
def _quoted_fields(template: str) -> frozenset[str]:
    """The fields a template quotes with `!r`: by the catalogue's convention,
    the names and keys a client sent."""
    return frozenset(field for _, field, _, conversion in string.Formatter().parse(template)
                     if field and conversion == "r")


def cap_message(message: str, bytes_max: int = MESSAGE_BYTES_MAX) -> str:
    """The message, cut to at most `bytes_max` UTF-8 bytes with a note that it was
    cut: the guard for text a template does not quote (a `detail` built elsewhere)."""
    data = message.encode()
    if len(data) <= bytes_max:
        return message
    note = f"… (message cut from {len(data):,} bytes)"
    head = data[:bytes_max - len(note.encode())].decode(errors="ignore")
    return head + note


class BrokerError(Exception):
    """An error to report to the client: a catalogue entry filled in."""

    def __init__(self, name: str, **params: Any) -> None:
        kind = CATALOGUE[name]
        self.kind = kind
        for field in _quoted_fields(kind.template):
            value = params.get(field)
            if isinstance(value, (str, bytes)) and len(value) > QUOTE_CHARS_MAX:
                params[field] = _Quoted(value)
        self.message = cap_message(kind.template.format(**params))
        super().__init__(self.message)

    @property
    def code(self) -> grpc.StatusCode:
        return self.kind.code
