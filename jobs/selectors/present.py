"""How jobs are presented: one kind-prefix registry for what apps say about their own kinds.

Apps describe their jobs by kind prefix ("downloads." for every download
kind, "downloads.fetch" for one of them): the object a job works for on its
admin page (jobs/admin/jobs.py `register_job_link`), how its progress message
reads (jobs/admin/views.py `register_progress_words`). Each is a KindPrefixes,
so a kind finds its entry the same way in both.
"""


class KindPrefixes:
    """Values registered under kind prefixes; a kind finds the one of its longest matching prefix.

    A prefix matches every kind that starts with it, letter for letter: "downloads."
    covers "downloads.fetch" but not "downloadsx.fetch", while "downloads" would cover
    both, so a prefix meant for a namespace ends with its dot. Registering a prefix again
    replaces its value.
    """

    def __init__(self):
        self._values = {}  # prefix -> value

    def register(self, prefix, value):
        self._values[prefix] = value

    def pop(self, prefix, default=None):
        """Forget `prefix`; its value, or `default` when it was not registered."""
        return self._values.pop(prefix, default)

    def lookup(self, kind):
        """The value of the longest prefix `kind` starts with, or None when none does."""
        matching = [prefix for prefix in self._values if kind.startswith(prefix)]
        return self._values[max(matching, key=len)] if matching else None
