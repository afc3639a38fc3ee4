"""Simplified Chinese: the catalogue is complete and compiled, and pages speak it when asked."""

import ast
import gettext
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

CATALOGUE = Path(settings.BASE_DIR) / "locale" / "zh_Hans" / "LC_MESSAGES"
PO = CATALOGUE / "django.po"
MO = CATALOGUE / "django.mo"

CHINESE_BROWSER = "zh-CN,zh;q=0.9"
HAN = re.compile(r"[\u3400-\u9fff]")
FIELD = re.compile(r'^(msgctxt|msgid|msgid_plural|msgstr(?:\[\d+\])?) (".*")$')
PYTHON_FORMAT = re.compile(r"%\(\w+\)[-#0 +]*\d*(?:\.\d+)?[sdifrx]")
BRACE_FORMAT = re.compile(r"\{\w*\}")


def read_po(path):
    """Every live entry of a .po file as {"flags", "msgctxt", "msgid", "msgid_plural", "msgstr"}.

    "msgstr" is a list: one item for a plain entry, one per plural form otherwise.
    Obsolete entries (#~) are what msgmerge keeps of removed strings; they are not shipped.
    """
    entries = []
    for block in path.read_text(encoding="utf-8").split("\n\n"):
        lines = [line for line in block.splitlines() if line and not line.startswith("#~")]
        if not any(line.startswith("msgid ") for line in lines):
            continue
        entry = {"flags": set(), "msgctxt": None, "msgid_plural": None, "msgstr": []}
        field = None
        for line in lines:
            if line.startswith("#,"):
                entry["flags"] |= {flag.strip() for flag in line[2:].split(",")}
            elif match := FIELD.match(line):
                field = match.group(1)
                value = ast.literal_eval(match.group(2))
                if field.startswith("msgstr"):
                    entry["msgstr"].append(value)
                else:
                    entry[field] = value
            elif line.startswith('"') and field:
                # A continuation line of the field above (long strings are wrapped).
                value = ast.literal_eval(line)
                if field.startswith("msgstr"):
                    entry["msgstr"][-1] += value
                else:
                    entry[field] += value
        entries.append(entry)
    return entries


@pytest.fixture(scope="module")
def po_entries():
    assert PO.exists(), f"{PO} is missing; run makemessages -l zh_Hans"
    return read_po(PO)


def messages_of(entries):
    return [entry for entry in entries if entry["msgid"] != ""]


# --- The catalogue --------------------------------------------------------------------


@pytest.mark.dbless
def test_catalogue_header_is_final_and_has_one_plural_form(po_entries):
    header = next(entry for entry in po_entries if entry["msgid"] == "")
    assert "fuzzy" not in header["flags"], "msgfmt drops a fuzzy header's plural rule"
    assert "Plural-Forms: nplurals=1; plural=0;" in header["msgstr"][0]
    assert "Language: zh_Hans" in header["msgstr"][0]
    assert len(messages_of(po_entries)) > 400, "makemessages found far fewer strings than expected"


@pytest.mark.dbless
def test_every_message_is_translated(po_entries):
    untranslated = [entry["msgid"] for entry in messages_of(po_entries)
                    if not entry["msgstr"] or any(text == "" for text in entry["msgstr"])]
    assert untranslated == []


@pytest.mark.dbless
def test_no_message_is_fuzzy(po_entries):
    fuzzy = [entry["msgid"] for entry in po_entries if "fuzzy" in entry["flags"]]
    assert fuzzy == []


@pytest.mark.dbless
def test_plural_messages_have_exactly_one_form(po_entries):
    # Chinese has one plural form; a second msgstr[1] would never be read.
    plurals = [entry for entry in messages_of(po_entries) if entry["msgid_plural"] is not None]
    assert plurals
    assert [entry["msgid"] for entry in plurals if len(entry["msgstr"]) != 1] == []


@pytest.mark.dbless
def test_translations_keep_their_placeholders(po_entries):
    wrong = []
    for entry in messages_of(po_entries):
        for pattern in (PYTHON_FORMAT, BRACE_FORMAT):
            source = set(pattern.findall(entry["msgid"]))
            if entry["msgid_plural"] is None:
                if any(set(pattern.findall(text)) != source for text in entry["msgstr"]):
                    wrong.append(entry["msgid"])
            else:
                # The one Chinese form serves every count, so it follows the plural's
                # placeholders; it may not invent any.
                source |= set(pattern.findall(entry["msgid_plural"]))
                if any(not set(pattern.findall(text)) <= source for text in entry["msgstr"]):
                    wrong.append(entry["msgid"])
    assert wrong == []


@pytest.mark.dbless
def test_compiled_catalogue_matches_the_source(po_entries):
    # Compared by content, not by file times: a git checkout writes django.mo
    # before django.po, so a fresh clone would always look stale by mtime.
    assert MO.exists(), f"{MO} is missing; run compilemessages -l zh_Hans"
    with MO.open("rb") as mo_file:
        compiled = gettext.GNUTranslations(mo_file)
    stale = []
    for entry in messages_of(po_entries):
        context, msgid = entry["msgctxt"], entry["msgid"]
        if entry["msgid_plural"] is None:
            got = [compiled.pgettext(context, msgid) if context else compiled.gettext(msgid)]
        else:
            plural = entry["msgid_plural"]
            got = [compiled.npgettext(context, msgid, plural, 2) if context
                   else compiled.ngettext(msgid, plural, 2)]
        if got != entry["msgstr"]:
            stale.append(msgid)
    assert stale == [], "django.mo is stale; run compilemessages -l zh_Hans"


# --- Pages --------------------------------------------------------------------------


def page(client, name, accept_language):
    response = client.get(reverse(name), headers={"Accept-Language": accept_language})
    assert response.status_code == 200
    return response.content.decode()


def assert_chinese_layout(html):
    assert '<html lang="zh-hans">' in html
    assert '<nav aria-label="主导航">' in html
    assert '<a href="/" aria-current="page">首页</a>' in html  # the page it is on
    assert '<button type="submit" class="link">退出登录</button>' in html
    assert "修改密码" in html
    assert '<option value="zh-hans" selected>简体中文</option>' in html
    assert "Log out" not in html


def assert_english(html):
    assert '<html lang="en">' in html
    # The switcher names each language in its own words; nothing else may be Chinese.
    assert HAN.findall(html.replace("简体中文", "")) == []


@pytest.mark.django_db
def test_home_follows_a_chinese_browser(alice_client):
    html = page(alice_client, "home", accept_language=CHINESE_BROWSER)
    assert_chinese_layout(html)
    assert "<title>首页 · Haulage</title>" in html
    assert "<h1>欢迎，alice</h1>" in html
    assert "下载、视频分析和洞察" in html


@pytest.mark.django_db
def test_login_page_follows_a_chinese_browser(client):
    html = page(client, "login", accept_language=CHINESE_BROWSER)
    assert '<html lang="zh-hans">' in html
    assert "<title>登录 · Haulage</title>" in html
    assert '<button type="submit">登录</button>' in html
    assert "用户名" in html  # the form's own label, from Django's catalogue
    assert "Log in" not in html


@pytest.mark.django_db
@pytest.mark.parametrize("accept_language", ["en", "en-US,en;q=0.9", "fr-FR,fr;q=0.9"])
def test_other_browsers_get_english(client, alice_client, accept_language):
    login = page(client, "login", accept_language=accept_language)
    assert_english(login)
    assert '<button type="submit">Log in</button>' in login
    home = page(alice_client, "home", accept_language=accept_language)
    assert_english(home)
    assert "<h1>Welcome, alice</h1>" in home
    assert '<a href="/" aria-current="page">Home</a>' in home


@pytest.mark.django_db
def test_switcher_choice_beats_the_browser(alice_client):
    response = alice_client.post(reverse("set_language"),
                                 {"language": "zh-hans", "next": reverse("home")})
    assert response.status_code == 302
    assert response["Location"] == reverse("home")
    assert alice_client.cookies[settings.LANGUAGE_COOKIE_NAME].value == "zh-hans"

    home = page(alice_client, "home", accept_language="en")
    assert_chinese_layout(home)
    assert "<h1>欢迎，alice</h1>" in home
    login = page(alice_client, "login", accept_language="en")
    assert '<button type="submit">登录</button>' in login

    alice_client.post(reverse("set_language"), {"language": "en", "next": reverse("home")})
    assert_english(page(alice_client, "home", accept_language=CHINESE_BROWSER))


@pytest.mark.django_db
def test_switcher_works_before_logging_in(client):
    response = client.post(reverse("set_language"),
                           {"language": "zh-hans", "next": reverse("login")})
    assert response.status_code == 302
    assert response["Location"] == reverse("login")
    html = page(client, "login", accept_language="en")
    assert '<button type="submit">登录</button>' in html
