"""The plan PostgreSQL would run an engine statement on, as a prepared statement would."""

from django.db import connection, transaction


def prepared_plan(sql, params, *, mode):
    """EXPLAIN (not run) of `sql` prepared and executed with `params`, with `plan_cache_mode`
    set to `mode` ("force_generic_plan" or "force_custom_plan") for that one look."""
    numbered = sql
    for number in range(1, len(params) + 1):
        numbered = numbered.replace("%s", f"${number}", 1)
    assert "%s" not in numbered
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL plan_cache_mode = {mode}")
        cursor.execute(f"PREPARE looked_at AS {numbered}")
        cursor.execute(f"EXPLAIN EXECUTE looked_at({', '.join(['%s'] * len(params))})", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("DEALLOCATE looked_at")
    return plan
