"""Every URL pattern the site serves, read from Django's resolver, so a new endpoint is fuzzed
without anyone listing it."""

import re
from dataclasses import dataclass

from django.urls import URLPattern, URLResolver, get_resolver


@dataclass(frozen=True)
class Route:
    regex: str  # the whole path's pattern, for Hypothesis' from_regex
    name: str | None  # "namespace:name", for reverse() with real ids
    groups: tuple  # the names of its keyword arguments

    def __str__(self):
        return self.name or self.regex


def _join(prefix, pattern):
    regex = pattern.regex.pattern
    regex = regex.removeprefix("^")
    return prefix + regex.removesuffix(r"\Z").removesuffix("$")


def routes():
    found = {}

    def walk(resolver, prefix, namespace):
        for entry in resolver.url_patterns:
            regex = _join(prefix, entry.pattern)
            if isinstance(entry, URLResolver):
                ns = namespace
                if entry.namespace:
                    ns = f"{namespace}:{entry.namespace}" if namespace else entry.namespace
                walk(entry, regex, ns)
            elif isinstance(entry, URLPattern):
                name = entry.name and (f"{namespace}:{entry.name}" if namespace else entry.name)
                groups = tuple(sorted(re.compile(regex).groupindex))
                found.setdefault(regex, Route(regex, name, groups))

    walk(get_resolver(), "", "")
    return sorted(found.values(), key=lambda route: route.regex)
