"""Orders in Avro with an evolving schema in, order lines in Protobuf out, both through
a Confluent-compatible Schema Registry (run with ``-X schema.registry.url=URL``).

Input ``orders``: Avro values from two generations of producers on one topic, each
record framed with its writer's schema id. ``ORDER_V1`` has ``id``, ``user`` and
``amount`` (an ``int`` of cents); ``ORDER_V2`` promotes ``amount`` to ``long`` and adds
``currency`` with the default ``"EUR"``. The job reads every record as ``ORDER_V2``
(its reader schema): v1 records get ``currency="EUR"``.

Output ``order-lines``: key = user, value = Protobuf ``shop.OrderLine`` (``id``,
``user``, ``cents``, ``currency``, ``large``: cents of at least 10 000), its schema
looked up under the record-name subject ``shop.OrderLine`` (registered here with
``auto_register=True``; production registries register it ahead and keep the default).
Orders with a non-positive amount are dropped.

Records whose schema id the registry does not know, or whose body does not decode,
go to the dead-letter topic with the reason; while the registry is unreachable the
job retries, then fails (nothing is dead-lettered for an outage).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kstream.api import Topology
from kstream.serde import AvroSerde, ProtobufSerde

SOURCE = "orders"
SINK = "order-lines"
LARGE_CENTS = 10_000

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "amount", "type": "int"},
    ],
}
ORDER_V2 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "amount", "type": "long"},
        {"name": "currency", "type": "string", "default": "EUR"},
    ],
}


def order_line_class() -> Any:
    """The ``shop.OrderLine`` message class (built from its descriptor: no protoc needed)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(name="shop/order_line.proto", package="shop")
    f.syntax = "proto3"
    m = f.message_type.add(name="OrderLine")
    kind = descriptor_pb2.FieldDescriptorProto
    for number, (name, t) in enumerate(
        (
            ("id", kind.TYPE_INT64),
            ("user", kind.TYPE_STRING),
            ("cents", kind.TYPE_INT64),
            ("currency", kind.TYPE_STRING),
            ("large", kind.TYPE_BOOL),
        ),
        1,
    ):
        m.field.add(name=name, number=number, type=t)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.OrderLine"))


OrderLine = order_line_class()


def order_line(order: dict[str, Any]) -> Any:
    cents = int(order["amount"])
    return OrderLine(
        id=order["id"],
        user=order["user"],
        cents=cents,
        currency=order["currency"],
        large=cents >= LARGE_CENTS,
    )


topology = Topology("registry_orders")
(
    topology.source(
        SOURCE, key_serde="bytes", value_serde=AvroSerde.registry(reader_schema=ORDER_V2)
    )
    .filter(lambda order: order["amount"] > 0)
    .key_by(lambda order: order["user"], key_serde="str")
    .map(order_line)
    .to(
        SINK,
        key_serde="str",
        value_serde=ProtobufSerde.registry(
            message_type=OrderLine, strategy="record", auto_register=True
        ),
    )
)


def expected_output(orders: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """``(user, order line fields)`` per order read as ``ORDER_V2``, in input order."""
    out = []
    for order in orders:
        if order["amount"] <= 0:
            continue
        cents = int(order["amount"])
        line = {
            "id": order["id"],
            "user": order["user"],
            "cents": cents,
            "currency": order.get("currency", "EUR"),
            "large": cents >= LARGE_CENTS,
        }
        out.append((order["user"], line))
    return out
