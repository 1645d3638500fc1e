"""moto's S3 server and a fresh bucket per test, shared with the upload tests."""

from tests.uploads.conftest import aws_env, bucket, moto, s3  # noqa: F401
