"""The download pages and the JSON API; included at the site's root by project/urls.py."""

from django.urls import path, re_path

from downloads import api, views

app_name = "downloads"

ACTIONS = "pause|resume|cancel|retry"

urlpatterns = [
    path("downloads/", views.download_list, name="list"),
    path("downloads/storage/", views.download_storage, name="storage"),
    path("downloads/<uuid:download_id>/", views.download_detail, name="detail"),
    path("downloads/<uuid:download_id>/row/", views.download_row, name="row"),
    path("downloads/<uuid:download_id>/file/", views.download_file, name="file"),
    path("downloads/<uuid:download_id>/edit/", views.download_edit, name="edit"),
    path("downloads/<uuid:download_id>/delete/", views.download_delete, name="delete"),
    re_path(rf"^downloads/(?P<download_id>[0-9a-f-]{{36}})/(?P<name>{ACTIONS})/$",
            views.download_action, name="action"),
    path("downloads/<uuid:download_id>/shots/", views.download_shots, name="shots"),
    re_path(r"^downloads/(?P<download_id>[0-9a-f-]{36})/shots/(?P<name>segment|analyze)/$",
            views.download_shots_action, name="shots_action"),
    re_path(r"^downloads/(?P<download_id>[0-9a-f-]{36})/shots/(?P<index>[0-9]+)/"
            r"(?P<image>thumbnail|strip)\.jpg$", views.shot_image, name="shot_image"),
    path("api/downloads/", api.downloads, name="api_list"),
    path("api/downloads/<str:download_id>/", api.download, name="api_download"),
    path("api/downloads/<str:download_id>/segment/", api.segment, name="api_segment"),
    path("api/downloads/<str:download_id>/shots/", api.shots_list, name="api_shots"),
    path("api/downloads/<str:download_id>/file/", api.download_file, name="api_file"),
    path("api/shots/<str:shot_id>/analyze/", api.analyze, name="api_analyze"),
    # The actions answer with and without a trailing slash.
    re_path(rf"^api/downloads/(?P<download_id>[^/]+)/(?P<name>{ACTIONS})/?$", api.action,
            name="api_action"),
]
