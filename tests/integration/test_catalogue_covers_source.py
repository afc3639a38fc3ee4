"""Every string the code marks for translation is in the Chinese catalogue, translated.

test_translation.py checks the catalogue as it is; this one asks `makemessages` what the source
holds today, so a new sentence in a template or a view that never reached django.po fails here
instead of showing English on a Chinese page.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.integration.test_translation import read_po

pytestmark = [pytest.mark.dbless, pytest.mark.slow]

ROOT = Path(settings.BASE_DIR)
PO = Path("locale") / "zh_Hans" / "LC_MESSAGES" / "django.po"


@pytest.fixture
def gettext_tools():
    if shutil.which("msgmerge") and shutil.which("xgettext"):
        return
    message = "GNU gettext (msgmerge, xgettext) is not installed: apt-get install gettext"
    if os.environ.get("REQUIRE_SERVICES") == "1":
        pytest.fail(message)
    pytest.skip(message)


def test_makemessages_finds_nothing_the_catalogue_lacks(gettext_tools, tmp_path):
    # makemessages writes into the tree it reads, so it reads a copy of the sources.
    copy = tmp_path / "src"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(
        ".*", "var", "__pycache__", "*.pyc", "*.mo", "node_modules"))
    subprocess.run([sys.executable, "manage.py", "makemessages", "-l", "zh_Hans", "--no-obsolete"],
                   cwd=copy, check=True, capture_output=True, text=True)
    regenerated = read_po(copy / PO)
    missing = [entry["msgid"] for entry in regenerated if entry["msgid"] and (
        not entry["msgstr"] or "" in entry["msgstr"] or "fuzzy" in entry["flags"])]
    assert missing == [], "run makemessages -l zh_Hans --no-obsolete and translate these"
    current = {(entry["msgctxt"], entry["msgid"]) for entry in read_po(ROOT / PO)}
    gone = current - {(entry["msgctxt"], entry["msgid"]) for entry in regenerated}
    assert gone == set(), "the catalogue holds strings the code no longer uses"
