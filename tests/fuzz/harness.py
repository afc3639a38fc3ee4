"""The fuzz layer's budget, its figures, and what it reads from the site between requests.

`FUZZ_EXAMPLES` is how many generated requests each route gets (a few inside
`make test`; `make fuzz` sets many). The short run is derandomised, so `make
test` sends the same requests every time and stays a regression suite; a long
run explores anew each time. A failure prints the blob that reproduces it
(`@reproduce_failure`); no example database is kept between runs.
"""

import os
from collections import Counter
from html.parser import HTMLParser

from django.apps import apps
from hypothesis import HealthCheck, settings

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "3"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 20,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)

STATS = Counter()  # examples, requests, and answers by status class, for the summary

# Sessions are written by logins of the fixture itself, not by the requests under test.
UNCOUNTED = {"sessions.session"}


def row_counts():
    return {model._meta.label_lower: model._base_manager.count() for model in apps.get_models()
            if model._meta.label_lower not in UNCOUNTED and model._meta.managed}


class FormFields(HTMLParser):
    """The fields of the forms on a page, with the values the page fills in."""

    def __init__(self):
        super().__init__()
        self.fields, self._select = {}, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        name = attrs.get("name")
        if tag in ("input", "textarea") and name:
            if attrs.get("type") in ("checkbox", "radio") and "checked" not in attrs:
                self.fields.setdefault(name, None)
            else:
                self.fields[name] = attrs.get("value") or ""
        elif tag == "select" and name:
            self._select = name
            self.fields.setdefault(name, None)
        elif tag == "option" and self._select and (
                self.fields[self._select] is None or "selected" in attrs):
            self.fields[self._select] = attrs.get("value", "")

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None


def form_fields(html):
    parser = FormFields()
    parser.feed(html)
    return {name: value for name, value in parser.fields.items()
            if name != "csrfmiddlewaretoken"}
