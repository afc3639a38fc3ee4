"""The site's URLs plus /metrics, as project/urls.py has them once the metrics line is added."""

from django.urls import path

from jobs.metrics import metrics_view
from project.urls import urlpatterns as site_urlpatterns

urlpatterns = [*site_urlpatterns, path("metrics", metrics_view, name="metrics")]
