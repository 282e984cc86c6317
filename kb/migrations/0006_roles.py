"""The two roles, as Django groups (see kb/roles.py)."""

from django.db import migrations


def create_roles(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    from kb.roles import ensure_roles

    # Permissions are normally created after all migrations; the groups need them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    # Permissions of models created later (MetadataField) are added by their migrations (0020).
    ensure_roles(
        apps.get_model("auth", "Group"), apps.get_model("auth", "Permission"), skip_missing=True
    )


def drop_roles(apps, schema_editor):
    from kb.roles import ROLES

    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("kb", "0005_permissions"),
        ("ingestion", "0001_initial"),
        ("retrieval", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(create_roles, drop_roles)]
