import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_log_in_and_see_the_home_page(live_server, page, django_user_model):
    django_user_model.objects.create_user("dora", password="explorer-pass-1")
    page.goto(f"{live_server.url}/")
    assert "/accounts/login/" in page.url
    page.fill("input[name=username]", "dora")
    page.fill("input[name=password]", "explorer-pass-1")
    page.click("button[type=submit]")
    page.wait_for_selector("h1")
    assert page.inner_text("h1") == "Welcome, dora"
    page.click("text=Log out")
    page.wait_for_url("**/accounts/login/**")
