"""The worked design of seed 000: documents whose index must never go back in version."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Document(models.Model):
    """A document; each edit is a new revision, and each revision is one input version."""

    tenant = models.ForeignKey("jobs.Tenant", null=True, blank=True, on_delete=models.PROTECT)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    title = models.CharField(max_length=200)
    current_version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.title} (v{self.current_version})"


class DocumentRevision(models.Model):
    """The text of one version, pinned by the job that indexes it."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="revisions")
    version = models.PositiveIntegerField()
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["document", "version"], name="documents_revision_unique_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.document_id} v{self.version}"


class DocumentIndex(models.Model):
    """The published index of a document: only ever moves to a newer version."""

    document = models.OneToOneField(
        Document, primary_key=True, on_delete=models.CASCADE, related_name="index"
    )
    version = models.PositiveIntegerField()
    terms = models.JSONField(default=dict)
    job_id = models.UUIDField()
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"index of {self.document_id} at v{self.version}"


class DocumentIndexLog(models.Model):
    """Every publish attempt and whether the conditional version change applied."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="index_log")
    version = models.PositiveIntegerField()
    applied = models.BooleanField()
    job_id = models.UUIDField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.document_id} v{self.version} applied={self.applied}"
