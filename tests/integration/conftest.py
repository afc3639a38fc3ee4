import pytest
from django.contrib.auth import get_user_model
from django.test import Client


@pytest.fixture
def owner(db):
    """A user who owns what a test makes."""
    return get_user_model().objects.create_user("vera")


@pytest.fixture
def client_of(owner):
    """A browser logged in as `owner`."""
    client = Client()
    client.force_login(owner)
    return client
