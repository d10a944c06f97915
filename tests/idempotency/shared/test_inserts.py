import pytest
from django.db import connection

from idempotency.models import IdempotencyRecord
from idempotency.shared.inserts import insert_shape
from outbox.models import OutboxMessage
from tests.testapp.models import Widget


def test_a_shape_is_built_once_per_model_database_and_columns():
    shape = insert_shape(IdempotencyRecord, connection)

    assert insert_shape(IdempotencyRecord, connection) is shape
    assert insert_shape(IdempotencyRecord, connection, ("key",)) is not shape
    assert "id" not in [field.name for field in shape.fields]


def test_a_field_computing_its_value_on_save_is_refused():
    # A prepared INSERT runs no pre_save(): auto_now_add would be skipped.
    with pytest.raises(ValueError, match="created_at computes its value on save"):
        insert_shape(Widget, connection)


def test_a_callable_default_is_called_for_every_row():
    # Constant defaults are prepared once per shape; a callable one (uuid4
    # here) would give every row the same value if it were.
    shape = insert_shape(OutboxMessage, connection, ("id", "aggregatetype"))
    values = {"aggregatetype": "order"}

    first, second = shape.params(values, connection), shape.params(values, connection)

    assert first[0] != second[0]
    assert first[1] == second[1] == "order"
