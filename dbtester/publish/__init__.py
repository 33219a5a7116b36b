"""Publishing a results directory to a bucket (``gs://``, ``s3://``) or a
directory (``file://``): where it goes (``destination``, a leaf the test-case
model uses), how the README's links change (``readme``), what messages may
show (``masking``) and the upload itself (``upload``)."""

from dbtester.publish.destination import (
    PUBLISH_SCHEMES,
    Destination,
    destination_problem,
    parse_destination,
    parse_public_url,
    public_base,
)
from dbtester.publish.masking import sanitize
from dbtester.publish.readme import published_readme
from dbtester.publish.upload import (
    ATTEMPTS,
    Published,
    Upload,
    content_type,
    plan_uploads,
    publish,
    retry_command,
)

__all__ = [
    "ATTEMPTS",
    "PUBLISH_SCHEMES",
    "Destination",
    "Published",
    "Upload",
    "content_type",
    "destination_problem",
    "parse_destination",
    "parse_public_url",
    "plan_uploads",
    "public_base",
    "publish",
    "published_readme",
    "retry_command",
    "sanitize",
]
