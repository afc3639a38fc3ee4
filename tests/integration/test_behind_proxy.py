"""X-Forwarded-Proto says a request came over HTTPS only when the site is told a proxy sits in
front (BEHIND_PROXY): otherwise any client could say so, and skip the redirect to HTTPS. Each case
reads the settings afresh from its environment, in a process of its own, as the site starts."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.once  # no database: the settings module and its middleware

ROOT = Path(__file__).resolve().parents[2]
ASK = """
import django
django.setup()
from django.test import Client
answer = Client().get("/accounts/login/", HTTP_X_FORWARDED_PROTO="https")
print(answer.status_code, answer.headers.get("Location", ""))
"""


def answer_with(tmp_path, **environ):
    env = {name: value for name, value in os.environ.items() if name != "BEHIND_PROXY"}
    env.update(DJANGO_SETTINGS_MODULE="project.settings", DEBUG="0", SECURE_SSL_REDIRECT="1",
               SECRET_KEY="test-secret-key-not-for-production", HAULAGE_VAR_DIR=str(tmp_path),
               ALLOWED_HOSTS="testserver", **environ)
    done = subprocess.run([sys.executable, "-c", ASK], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    status, _, location = done.stdout.strip().rpartition("\n")[2].partition(" ")
    return int(status), location


def test_without_a_proxy_the_header_is_ignored(tmp_path):
    assert answer_with(tmp_path) == (301, "https://testserver/accounts/login/")
    assert answer_with(tmp_path, BEHIND_PROXY="false")[0] == 301


def test_behind_a_proxy_the_header_is_honoured(tmp_path):
    assert answer_with(tmp_path, BEHIND_PROXY="true") == (200, "")
