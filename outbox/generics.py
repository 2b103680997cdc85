"""Django classes that django-stubs makes generic, subscriptable at runtime too.

To mypy `ModelAdmin[Job]` is an admin of jobs and `Paginator[Job]` pages of them, but Django's
own classes take no type arguments at runtime (`admin.ModelAdmin[Job]` is a TypeError). The
library subclasses these instead: to mypy they are Django's classes themselves; at runtime
each is a subclass that takes (and ignores) type arguments, so `class JobAdmin(ModelAdmin[Job])`
works in both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin, TabularInline
    from django.core.paginator import Paginator
    from django.forms.models import BaseInlineFormSet
else:
    from django.contrib import admin
    from django.core import paginator
    from django.forms import models as forms_models

    class _TypeArguments:
        """`Cls[...]` is `Cls` itself: the arguments are for mypy."""

        def __class_getitem__(cls, arguments: object) -> type:
            return cls

    class ModelAdmin(_TypeArguments, admin.ModelAdmin):
        pass

    class TabularInline(_TypeArguments, admin.TabularInline):
        pass

    class Paginator(_TypeArguments, paginator.Paginator):
        pass

    class BaseInlineFormSet(_TypeArguments, forms_models.BaseInlineFormSet):
        pass


__all__ = ["BaseInlineFormSet", "ModelAdmin", "Paginator", "TabularInline"]
