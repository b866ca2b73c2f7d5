"""A follower's words for an upstream's failure: the status code's name and the details
on one line, never gRPC's `<AioRpcError ... debug_error_string = ...>` text nor its
resolver text.

Method: real grpc.aio.AioRpcError objects as grpcio raises them (the details and
debug string copied from a follower's log against a closed port), and the SDK's
errors made from them, through the follower's `in_relay_words`.
"""

from __future__ import annotations

import grpc
import grpc.aio

from broker.errors import BrokerError
from broker.relay.follower import in_relay_words
from sdk import errors

REFUSED = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:16342: "
           "Failed to connect to remote host: connect: Connection refused (111)")
DEBUG = 'UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:"failed to connect"}'


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details, DEBUG)


def test_a_raw_grpc_error_is_its_code_and_details_on_one_line() -> None:
    error = rpc_error(grpc.StatusCode.UNAVAILABLE, REFUSED)
    assert "debug_error_string" in str(error)  # what the log showed before
    assert in_relay_words(error) == "UNAVAILABLE: connection refused"
    denied = rpc_error(grpc.StatusCode.PERMISSION_DENIED, "admin permission needed on 't'")
    assert in_relay_words(denied) == "PERMISSION_DENIED: admin permission needed on 't'"


def test_an_sdk_error_made_from_one_says_the_same() -> None:
    error = errors.from_rpc_error(rpc_error(grpc.StatusCode.UNAVAILABLE, REFUSED))
    assert in_relay_words(error) == "UNAVAILABLE: connection refused"
    missing = errors.from_rpc_error(rpc_error(grpc.StatusCode.NOT_FOUND, "topic 't' does not exist"))
    assert in_relay_words(missing) == "NOT_FOUND: topic 't' does not exist"


def test_a_failure_of_the_followers_own_has_no_status_code() -> None:
    assert in_relay_words(OSError("No space left on device")) == "No space left on device"
    refused = in_relay_words(BrokerError("topic_not_found", topic="t"))
    assert refused.startswith("NOT_FOUND: ") and "\n" not in refused
