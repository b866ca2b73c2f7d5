"""A write whose columns cannot become events is refused on the driver, at save().

Checked in the task instead, a bad row fails the task after the batches before
it were stored (a topic keeps them: there are no transactions), with the SDK's
words about 'headers[0]' rather than the column's type.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from spark_connector.options import OptionError, parse_write_options
from spark_connector.writer import check_input_schema

OPTIONS = parse_write_options({"broker": "127.0.0.1:6650", "topic": "orders"})


def _schema(headers: MapType) -> StructType:
    return StructType([StructField("key_long", LongType()), StructField("value", StringType()),
                       StructField("headers", headers)])


@pytest.mark.parametrize("headers", [
    MapType(StringType(), IntegerType()),
    MapType(IntegerType(), StringType()),
    MapType(StringType(), MapType(StringType(), StringType())),
])
def test_headers_of_other_types_are_refused_naming_the_column(headers: MapType) -> None:
    with pytest.raises(OptionError, match=r"column 'headers' has type map<.*needs "
                                          r"map<string, binary or string>"):
        check_input_schema(_schema(headers), OPTIONS)


@pytest.mark.parametrize("headers", [
    MapType(StringType(), BinaryType()),
    MapType(StringType(), StringType()),
    MapType(StringType(), StringType(), valueContainsNull=False),
])
def test_string_keyed_headers_of_binary_or_string_pass(headers: MapType) -> None:
    check_input_schema(_schema(headers), OPTIONS)
