"""The insight pages, the queue page and their JSON API; included at the site's root."""

from django.urls import path

from insights import api, views

app_name = "insights"

urlpatterns = [
    path("insights/", views.insight_list, name="list"),
    path("insights/request/", views.insight_request, name="request"),
    path("insights/retry-failed/", views.insights_retry_failed, name="retry_failed"),
    path("insights/<uuid:insight_id>/panel/", views.insight_panel, name="panel"),
    path("insights/<uuid:insight_id>/retry/", views.insight_retry, name="retry"),
    path("queue/", views.queue, name="queue"),
    path("queue/rows/", views.queue_rows, name="queue_rows"),
    path("api/insights/", api.insights, name="api_list"),
    path("api/insights/retry-failed/", api.retry_failed, name="api_retry_failed"),
    path("api/insights/<str:insight_id>/", api.insight, name="api_insight"),
    path("api/queue/", api.queue, name="api_queue"),
]
