"""The standalone project's only pages: Django's admin, with the engine's lists in it."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
