"""The kind-prefix registry behind the admin's job links and progress words (jobs/selectors/present.py)."""

from jobs.selectors.present import KindPrefixes


def registry(*prefixes):
    """A registry whose value for each prefix is the prefix itself."""
    found = KindPrefixes()
    for prefix in prefixes:
        found.register(prefix, prefix)
    return found


def test_the_longest_matching_prefix_wins_whatever_the_order_of_registration():
    for order in (("downloads.", "downloads.fetch"), ("downloads.fetch", "downloads.")):
        prefixes = registry(*order)
        assert prefixes.lookup("downloads.fetch") == "downloads.fetch"
        assert prefixes.lookup("downloads.fetch_more") == "downloads.fetch"
        assert prefixes.lookup("downloads.edit") == "downloads."


def test_a_kind_no_prefix_matches_finds_nothing():
    prefixes = registry("downloads.", "insights.")
    assert prefixes.lookup("tests.noop") is None
    assert prefixes.lookup("downloads") is None  # shorter than the prefix
    assert KindPrefixes().lookup("downloads.fetch") is None


def test_a_prefix_matches_letter_for_letter_so_a_namespace_is_registered_with_its_dot():
    assert registry("downloads.").lookup("downloadsx.fetch") is None
    assert registry("downloads").lookup("downloadsx.fetch") == "downloads"
    assert registry("").lookup("anything.at_all") == ""  # the empty prefix covers every kind


def test_registering_a_prefix_again_replaces_its_value_and_pop_forgets_it():
    prefixes = KindPrefixes()
    prefixes.register("insights.", "first")
    prefixes.register("insights.", "second")
    assert prefixes.lookup("insights.rebuild") == "second"
    assert prefixes.pop("insights.") == "second"
    assert prefixes.lookup("insights.rebuild") is None
    assert prefixes.pop("insights.", "gone") == "gone"
