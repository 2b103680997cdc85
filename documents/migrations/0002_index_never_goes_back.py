"""The database refuses an index update that lowers its version, whatever the caller does."""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION documents_index_version_monotonic() RETURNS trigger AS $$
BEGIN
    IF NEW.version < OLD.version THEN
        RAISE EXCEPTION 'documents_index_version_monotonic: document % index v% -> v%',
            OLD.document_id, OLD.version, NEW.version USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER documents_index_version_monotonic BEFORE UPDATE ON documents_documentindex
    FOR EACH ROW EXECUTE FUNCTION documents_index_version_monotonic();
"""

REVERSE = """
DROP TRIGGER IF EXISTS documents_index_version_monotonic ON documents_documentindex;
DROP FUNCTION IF EXISTS documents_index_version_monotonic();
"""


class Migration(migrations.Migration):
    dependencies = [("documents", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, REVERSE)]
