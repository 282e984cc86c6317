from django.contrib import admin
from django.urls import include, path

admin.site.site_header = "Canon"
admin.site.site_title = "Canon"
admin.site.index_title = "Knowledge bases"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("retrieval.urls")),
]
