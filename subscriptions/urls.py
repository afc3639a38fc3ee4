"""The subscriptions pages; included at the site's root by project/urls.py."""

from django.urls import path, re_path

from subscriptions import views

app_name = "subscriptions"

ID = r"(?P<subscription_id>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"

urlpatterns = [
    path("subscriptions/", views.subscription_list, name="list"),
    path("subscriptions/<uuid:subscription_id>/", views.subscription_detail, name="detail"),
    path("subscriptions/<uuid:subscription_id>/row/", views.subscription_row, name="row"),
    # Actions are POSTs; with or without the trailing slash (a POST cannot be redirected).
    re_path(rf"^subscriptions/{ID}/(?P<name>pause|resume|check)/?$", views.subscription_action,
            name="action"),
    re_path(rf"^subscriptions/{ID}/delete/?$", views.subscription_delete, name="delete"),
]
