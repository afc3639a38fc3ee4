from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from django.views.i18n import set_language

from core import health, throttle, views
from jobs.metrics import metrics_view

# Failed admin logins count like the site's own (core/throttle.py).
admin.site.login_form = throttle.AdminLoginForm

urlpatterns = [
    path("", views.home, name="home"),
    path("home/jobs/", views.home_jobs, name="home_jobs"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    # Pages link the icon; this answers browsers that ask for it anyway (the admin, feeds).
    path("favicon.ico", login_not_required(RedirectView.as_view(url=static("favicon.svg")))),
    # Before Django's own: logins and password resets are throttled (429 past the limit).
    path("accounts/login/", throttle.login, name="login"),
    path("accounts/password_reset/", throttle.password_reset, name="password_reset"),
    path("accounts/", include("django.contrib.auth.urls")),
    # Visitors choose a language on the login page, before they have a session.
    path("i18n/setlang/", login_not_required(set_language), name="set_language"),
    path("admin/login/", throttle.answering_429(admin.site.login)),
    path("admin/", admin.site.urls),
    path("", include("downloads.urls")),
    path("", include("insights.urls")),
    path("", include("subscriptions.urls")),
]

handler400 = "core.views.bad_request"
handler403 = "core.views.permission_denied"
handler404 = "core.views.page_not_found"
handler500 = "core.views.server_error"
