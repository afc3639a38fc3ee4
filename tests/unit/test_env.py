import pytest

from project import env


@pytest.mark.parametrize(
    "raw",
    ["foo://bar", "postgres://u@h:notaport/x", "mysql://u@h/x"],
)
def test_malformed_database_url_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("DATABASE_URL", raw)
    with pytest.raises(env.SettingsError, match="DATABASE_URL"):
        env.get_database("DATABASE_URL", "sqlite:///x.sqlite3")


def test_database_url_default_is_used_when_unset(monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    config = env.get_database("DATABASE_URL", "sqlite:////tmp/x.sqlite3")
    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["NAME"] == "/tmp/x.sqlite3"


@pytest.mark.parametrize("raw", ["http://localhost:6379", "redis://", "redis://h:port/0", "nonsense"])
def test_malformed_redis_url_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("REDIS_URL", raw)
    with pytest.raises(env.SettingsError, match="REDIS_URL"):
        env.get_redis_url("REDIS_URL")


@pytest.mark.parametrize("raw", ["redis://127.0.0.1:6379/0", "rediss://cache.example:6380/1", "unix:///tmp/r.sock"])
def test_good_redis_urls_pass(monkeypatch, raw):
    monkeypatch.setenv("REDIS_URL", raw)
    assert env.get_redis_url("REDIS_URL") == raw


def test_unset_redis_url_means_local_mode(monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert env.get_redis_url("REDIS_URL") == ""


def test_bool_and_number_parsing(monkeypatch):
    monkeypatch.setenv("FLAG", "yes")
    monkeypatch.setenv("N", "12")
    assert env.get_bool("FLAG") is True
    assert env.get_number("N", 3, int) == 12
    monkeypatch.setenv("FLAG", "perhaps")
    with pytest.raises(env.SettingsError, match="FLAG must be true or false"):
        env.get_bool("FLAG")
    monkeypatch.setenv("N", "twelve")
    with pytest.raises(env.SettingsError, match="N must be a whole number"):
        env.get_number("N", 3, int)
    monkeypatch.setenv("N", "-1")
    with pytest.raises(env.SettingsError, match="at least 0"):
        env.get_number("N", 3, int, minimum=0)
