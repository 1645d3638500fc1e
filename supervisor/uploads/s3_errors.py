"""botocore's exceptions → retry later, or stop uploading.

Only errors an operator has to fix stop the uploads: missing or rejected credentials, a
missing bucket, a wrong region, a denied permission. Everything else — throttling, 5xx,
timeouts, refused or dropped connections, and digests the store rejected because bytes were
damaged on the way — is retried, since it goes away by itself. An unknown error is retried
too: it stays visible as the last error and the backlog, and costs nothing but a request now
and then, while stopping on it would leave a day's shards unuploaded for a hiccup.
"""

from __future__ import annotations

from supervisor.uploads.sink import CorruptUploadError, FatalUploadError, TransientUploadError

FATAL_CODES = frozenset({
    "AccessDenied", "AllAccessDisabled", "AccountProblem", "InvalidAccessKeyId",
    "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "TokenRefreshRequired",
    "NoSuchBucket", "InvalidBucketName", "PermanentRedirect", "AuthorizationHeaderMalformed",
    "InvalidObjectState", "NotSignedUp",
})

# The store checked a digest we sent and the bytes did not match it.
DIGEST_CODES = frozenset({"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch",
                          "IncompleteBody"})


def classify(exc: BaseException, what: str) -> Exception:
    """The uploader's error for a botocore/boto3 exception raised while doing `what`."""
    from botocore.exceptions import (
        ClientError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
    )

    if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
        return FatalUploadError(f"{what}: no usable AWS credentials ({exc}); set them in the "
                                "environment, ~/.aws or an instance role")
    if isinstance(exc, NoRegionError):
        return FatalUploadError(f"{what}: no AWS region ({exc}); set uploads.region")
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = err.get("Message") or str(exc)
        text = f"{what}: {code or status} (HTTP {status}): {message}"
        if code in DIGEST_CODES:
            return CorruptUploadError(text)
        if code in FATAL_CODES or status in (301, 403):
            return FatalUploadError(text)
        return TransientUploadError(text)
    # EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError,
    # and anything else botocore raises for a request that did not complete.
    return TransientUploadError(f"{what}: {type(exc).__name__}: {exc}")
