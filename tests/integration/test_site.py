import pytest
from django.urls import reverse

from core.models import ApiToken


def test_pages_require_login(client, db):
    response = client.get(reverse("home"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_login_page_and_home(client, user):
    assert client.get(reverse("login")).status_code == 200
    response = client.post(reverse("login"), {"username": "alice", "password": "correct-horse-9"}, follow=True)
    assert response.status_code == 200
    assert b"Welcome, alice" in response.content


def test_password_change_page(alice_client):
    response = alice_client.get(reverse("password_change"))
    assert response.status_code == 200
    assert b"Change password" in response.content


def test_healthz_needs_no_login_and_no_database(client):
    # No `db` fixture: any query here would raise.
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_ok_when_database_and_migrations_are_there(client, db):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"]["database"] == "ok"
    assert response.json()["checks"]["migrations"] == "ok"


def test_readyz_reports_a_dead_redis(client, db, settings):
    from jobs.cv import clients

    # A port nothing listens on: the check must fail fast with a 503, not hang.
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    clients._clients.clear()
    try:
        response = client.get("/readyz")
    finally:
        clients._clients.clear()
    assert response.status_code == 503
    assert response.json()["checks"]["redis"].startswith("redis unreachable")


def test_readyz_checks_a_live_redis(client, db, settings, redis_url):
    from jobs.cv import clients

    settings.REDIS_URL = redis_url
    clients._clients.clear()
    try:
        response = client.get("/readyz")
    finally:
        clients._clients.clear()
    assert response.status_code == 200
    assert response.json()["checks"]["redis"] == "ok"


@pytest.mark.serial
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_readyz_turns_503_when_the_database_stops_and_200_when_it_is_back(client, pg_server):
    assert client.get("/readyz").status_code == 200
    pg_server.stop()
    try:
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["checks"]["database"].startswith("database unreachable")
    finally:
        pg_server.start()
    response = client.get("/readyz")
    assert response.status_code == 200, response.content


class TestApiTokens:
    def test_token_authenticates_as_its_user(self, client, user):
        from django.http import JsonResponse
        from django.test import RequestFactory

        from core.tokens import BearerTokenMiddleware

        _, raw = ApiToken.issue(user=user)
        seen = {}

        def view(request):
            seen["user"] = request.user
            return JsonResponse({})

        request = RequestFactory().get("/api/x", HTTP_AUTHORIZATION=f"Bearer {raw}")
        assert BearerTokenMiddleware(view)(request).status_code == 200
        assert seen["user"] == user

    def test_only_the_hash_is_stored(self, user):
        token, raw = ApiToken.issue(user=user)
        token.refresh_from_db()
        assert raw not in (token.key_hash, token.key_prefix)
        assert len(token.key_hash) == 64

    @pytest.mark.parametrize("header", ["Bearer nope", "Bearer ", "Bearer hlg_" + "x" * 43])
    def test_wrong_token_is_401(self, client, db, header):
        response = client.get("/api/downloads/", HTTP_AUTHORIZATION=header)
        assert response.status_code == 401
        assert response.json()["error_code"] == "unauthorized"

    def test_revoked_token_is_401_even_with_a_session(self, alice_client, user):
        from django.utils import timezone

        token, raw = ApiToken.issue(user=user)
        token.revoked_at = timezone.now()
        token.save()
        response = alice_client.get("/api/downloads/", HTTP_AUTHORIZATION=f"Bearer {raw}")
        assert response.status_code == 401
