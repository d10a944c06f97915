"""The dashboard bench's fill writes rows every table it fills accepts: its
hand-written INSERTs name each column the tables require."""

import pytest

from bench import dashboard

pytestmark = [pytest.mark.postgresql, pytest.mark.django_db(transaction=True)]


def test_the_fill_writes_its_rows_into_every_table():
    dashboard.fill(rows=30)

    for model in dashboard.FILL:
        assert model.objects.count() == 30, model
