import os

# Playwright's sync API runs an event loop in this thread; Django's ORM calls
# made by the test itself are still synchronous and safe.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
