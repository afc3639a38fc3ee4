"""The real `manage.py`, in subprocesses, as an operator runs it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import database_url

ROOT = Path(__file__).resolve().parents[2]


def manage(*args, env=None, check=False):
    # The browser tests' async escape hatch must not leak into a deployment check.
    base = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT, env={**base, **(env or {})}, capture_output=True, text=True, timeout=60, check=check,
    )


@pytest.mark.parametrize(
    "variable,value",
    [("DATABASE_URL", "postgres://u@h:notaport/x"), ("REDIS_URL", "http://nope"), ("DEBUG", "maybe")],
)
def test_malformed_settings_are_one_sentence_not_a_traceback(variable, value):
    result = manage("check", env={variable: value})
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"haulage: {variable}")


def test_missing_secret_key_stops_start_up_with_debug_off():
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    env["DEBUG"] = "0"
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_check_deploy_is_clean_for_production_settings():
    result = manage("check", "--deploy", "--fail-level", "WARNING",
                    env={"DEBUG": "0", "SECRET_KEY": "x" * 20 + "-production-key-that-is-long-enough-" + "y" * 20,
                         "SECURE_SSL_REDIRECT": "1"})
    assert result.returncode == 0, result.stderr


@pytest.mark.django_db(transaction=True)
def test_createapitoken_prints_a_token_that_authenticates(live_server, django_user_model):
    import httpx
    from django.db import connection

    django_user_model.objects.create_user("carol", password="pw-carol-123")
    env = {"DATABASE_URL": database_url(connection)}
    result = manage("createapitoken", "carol", env=env)
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert token.startswith("hlg_")
    ok = httpx.get(f"{live_server.url}/api/downloads/", headers={"Authorization": f"Bearer {token}"})
    assert ok.status_code == 200
    bad = httpx.get(f"{live_server.url}/api/downloads/",
                    headers={"Authorization": f"Bearer {token}x"})
    assert bad.status_code == 401
    missing = manage("createapitoken", "nobody", env=env)
    assert missing.returncode != 0 and "No user named 'nobody'" in missing.stderr
