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


class DocumentChunkIndex(models.Model):
    """The terms of one chunk of one revision, written by its `document.index_chunk` job as
    a local effect (in the job's completion transaction, once: the effect ledger). No unique
    constraint on purpose: a second row for a chunk would be a duplicate effect, and the
    ingestion tests count them."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    version = models.PositiveIntegerField()
    chunk = models.PositiveIntegerField()
    terms = models.JSONField(default=dict)
    job_id = models.UUIDField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["document", "version"], name="documents_chunk_doc_idx")]

    def __str__(self) -> str:
        return f"{self.document_id} v{self.version} chunk {self.chunk}"


class DocumentSummary(models.Model):
    """A revision's summary, written by its `document.summarize` job (a local effect, as
    DocumentChunkIndex; no unique constraint, so a duplicate would show)."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="summaries")
    version = models.PositiveIntegerField()
    chunks = models.PositiveIntegerField()  # how many chunk jobs it waited for
    indexed = models.PositiveIntegerField()  # how many of them succeeded
    terms = models.JSONField(default=dict)  # the top terms over the indexed chunks
    job_id = models.UUIDField()
    at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"summary of {self.document_id} v{self.version}"
