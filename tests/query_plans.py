"""What a statement's plan did as it ran, read from EXPLAIN ANALYZE."""

import json

from django.db import connection
from django.test.utils import CaptureQueriesContext


def rows_walked_past(sql: str) -> int:
    """The rows the statement's plan read and threw away, as it ran."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        (plan,) = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)

    def walk(node):
        yield node
        for child in node.get("Plans", ()):
            yield from walk(child)

    return sum(node.get("Rows Removed by Filter", 0) for node in walk(plan["Plan"]))


def captured(call, table: str) -> str:
    """The one statement ``call()`` sent that names ``table``."""
    with CaptureQueriesContext(connection) as queries:
        call()
    (query,) = [q for q in queries.captured_queries if table in q["sql"]]
    return query["sql"]
