"""How the admin lays out the lists of the engine and of the apps built on it."""


class FitsALaptop:
    """Long names wrap instead of widening the table beyond a laptop's screen
    (jobs/static/jobs/admin-lists.css). Shipped with the engine, so its own lists (the
    Schedules) need nothing of the project that installs it."""

    class Media:
        css = {"all": ["jobs/admin-lists.css"]}
