import os
import random

import pytest
from django.db import connection

from tests.servers import PostgresServer, database_url


def chaos_seed():
    """CHAOS_SEED replays a run; otherwise a fresh seed, printed with the report."""
    return int(os.environ.get("CHAOS_SEED") or random.randrange(2**31))


@pytest.fixture
def chaos(transactional_db, tmp_path):
    """Run a scenario against real workers on the test database; returns the checker's report."""
    from tests.chaos import kinds
    from tests.chaos.harness import Run, RunConfig
    from tests.chaos.scenarios import ScenarioSkipped

    kinds.register()
    runs = []

    def run(scenario, **options):
        pg_server = None
        if connection.vendor == "postgresql" and "TEST_PG_DATA" in os.environ:
            pg_server = PostgresServer()
        options.setdefault("database_url", database_url(connection))
        config = RunConfig(seed=chaos_seed(), work_dir=tmp_path / f"{scenario.name}-{len(runs)}",
                           pg_server=pg_server, **options)
        chaos_run = Run(config)
        runs.append(chaos_run)
        try:
            report = chaos_run.execute(scenario)
        except ScenarioSkipped as exc:
            pytest.skip(str(exc))
        print(report.describe())
        return report

    yield run
    for chaos_run in runs:
        chaos_run.cleanup()
    connection.close()
    kinds.unregister()
