"""Register Keybus's methods with a grpc.aio server.

Built by hand instead of with the generated `add_KeybusServicer_to_server`
for one reason: `Read` and `Subscribe` answer with bytes assembled from
stored records (`wire.py`, `subscription/delivery.py`), so their response
serializer is the identity. Every other method
uses the generated message classes.
"""

from __future__ import annotations

from typing import Any

import grpc

from sdk.core.pb import keybus_pb2 as pb

SERVICE = "keybus.v1.Keybus"


def _identity(data: bytes) -> bytes:
    return data


def generic_handler(produce: Any, read: Any, admin: Any, subscribe: Any | None = None,
                    subscription_admin: Any | None = None,
                    access: Any | None = None) -> grpc.GenericRpcHandler:
    """One generic handler for the Keybus service from the servicer objects."""
    handlers = {
        "Produce": grpc.stream_stream_rpc_method_handler(
            produce.Produce, pb.ProduceRequest.FromString, pb.ProduceResponse.SerializeToString),
        "InitProducer": grpc.unary_unary_rpc_method_handler(
            produce.InitProducer, pb.InitProducerRequest.FromString,
            pb.InitProducerResponse.SerializeToString),
        "Read": grpc.unary_stream_rpc_method_handler(
            read.Read, pb.ReadRequest.FromString, _identity),
        "CreateTopic": grpc.unary_unary_rpc_method_handler(
            admin.CreateTopic, pb.CreateTopicRequest.FromString, pb.TopicInfo.SerializeToString),
        "ListTopics": grpc.unary_unary_rpc_method_handler(
            admin.ListTopics, pb.ListTopicsRequest.FromString,
            pb.ListTopicsResponse.SerializeToString),
        "DescribeTopic": grpc.unary_unary_rpc_method_handler(
            admin.DescribeTopic, pb.DescribeTopicRequest.FromString,
            pb.TopicInfo.SerializeToString),
        "DeleteTopic": grpc.unary_unary_rpc_method_handler(
            admin.DeleteTopic, pb.DeleteTopicRequest.FromString,
            pb.DeleteTopicResponse.SerializeToString),
    }
    if subscribe is not None:  # deliveries are assembled as bytes, like Read responses
        handlers["Subscribe"] = grpc.stream_stream_rpc_method_handler(
            subscribe.Subscribe, pb.SubscribeRequest.FromString, _identity)
    if subscription_admin is not None:
        for name, request_type, response_type in (
                ("ListSubscriptions", pb.ListSubscriptionsRequest, pb.ListSubscriptionsResponse),
                ("DescribeSubscription", pb.DescribeSubscriptionRequest, pb.SubscriptionInfo),
                ("SeekSubscription", pb.SeekSubscriptionRequest, pb.SubscriptionInfo),
                ("DeleteSubscription", pb.DeleteSubscriptionRequest,
                 pb.DeleteSubscriptionResponse)):
            handlers[name] = grpc.unary_unary_rpc_method_handler(
                getattr(subscription_admin, name), request_type.FromString,
                response_type.SerializeToString)
    if access is not None:  # access control (broker/rpc/acl_servicer.py)
        access_methods: tuple[tuple[str, Any, Any], ...] = (
                ("GrantPermissions", pb.GrantPermissionsRequest, pb.GrantPermissionsResponse),
                ("RevokePermissions", pb.RevokePermissionsRequest, pb.RevokePermissionsResponse),
                ("ListPermissions", pb.ListPermissionsRequest, pb.ListPermissionsResponse),
                ("WhoAmI", pb.WhoAmIRequest, pb.WhoAmIResponse),
                ("RestrictSubscription", pb.RestrictSubscriptionRequest,
                 pb.RestrictSubscriptionResponse),
                ("UnrestrictSubscription", pb.UnrestrictSubscriptionRequest,
                 pb.UnrestrictSubscriptionResponse))
        for name, request_type, response_type in access_methods:
            handlers[name] = grpc.unary_unary_rpc_method_handler(
                getattr(access, name), request_type.FromString, response_type.SerializeToString)
    return grpc.method_handlers_generic_handler(SERVICE, handlers)
