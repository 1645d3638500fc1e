"""S3 (or an S3-compatible store) as a sink: put, then prove the bytes arrived whole.

Every request carries Content-MD5 (S3 refuses a body that does not match it) and, unless
turned off, x-amz-checksum-sha256. Stores differ, and moto's server accepts a wrong digest of
either kind without complaint, so the store's word is not taken: after a put the daemon
compares what came back with what it sent.
- single part: the ETag of a plain put is the MD5 of the object, compared with the shard's;
- multipart: each part's ETag against that part's MD5, and the final ETag against the MD5 of
  the part digests with "-N" appended (how S3 names a multipart object);
- when an ETag is not an MD5 at all (SSE-KMS, some S3-compatible stores), or does not match,
  the object is read back and its SHA-256 decides. A mismatch there is a corrupt upload,
  retried by the uploader; the object under the key is simply overwritten next time.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from supervisor.config import UploadsSection
from supervisor.uploads.s3_client import LazyClient, S3Location
from supervisor.uploads.s3_errors import classify
from supervisor.uploads.sink import CorruptUploadError, Receipt, ShardBlob, Sink, UploadError, b64

log = logging.getLogger("supervisor.uploads")


def multipart_etag(part_md5s: list[bytes]) -> str:
    """S3's ETag for a multipart object: MD5 over the parts' raw MD5s, then -N."""
    return f"{hashlib.md5(b''.join(part_md5s)).hexdigest()}-{len(part_md5s)}"


def _etag(response: dict[str, Any]) -> str | None:
    etag = response.get("ETag")
    return etag.strip('"') if isinstance(etag, str) else None


class S3Sink(Sink):
    removes_local = True

    def __init__(self, location: S3Location, uploads: UploadsSection,
                 client: LazyClient | None = None) -> None:
        self.location = location
        self.uploads = uploads
        self._client = client or LazyClient(uploads)

    def describe(self) -> str:
        return str(self.location)

    @property
    def client(self) -> Any:
        return self._client.get()

    # -- put ----------------------------------------------------------------------------------

    def put(self, blob: ShardBlob) -> Receipt:
        key = self.location.key(blob.key)
        if blob.size > self.uploads.multipart_threshold_bytes:
            return self._put_multipart(key, blob)
        return self._put_single(key, blob)

    def _call(self, what: str, fn: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return fn(**kwargs)
        except UploadError:
            raise
        except Exception as exc:  # botocore's whole family; classified, never swallowed
            raise classify(exc, what) from exc

    def _put_single(self, key: str, blob: ShardBlob) -> Receipt:
        kwargs: dict[str, Any] = {"Bucket": self.location.bucket, "Key": key,
                                  "Body": blob.data, "ContentMD5": b64(blob.md5),
                                  "ContentType": "application/x-ndjson"}
        if self.uploads.sha256_checksum:
            kwargs["ChecksumSHA256"] = b64(blob.sha256)
        response = self._call(f"put {key}", self.client.put_object, **kwargs)
        etag = _etag(response)
        if etag == blob.md5:
            return Receipt(etag, f"sha256:{blob.sha256}", "etag")
        return self._read_back(key, blob, etag, parts=1)

    def _put_multipart(self, key: str, blob: ShardBlob) -> Receipt:
        bucket, size = self.location.bucket, self.uploads.multipart_part_bytes
        create: dict[str, Any] = {"Bucket": bucket, "Key": key,
                                  "ContentType": "application/x-ndjson"}
        if self.uploads.sha256_checksum:
            create["ChecksumAlgorithm"] = "SHA256"
        upload_id = self._call(f"start multipart {key}", self.client.create_multipart_upload,
                               **create)["UploadId"]
        try:
            parts: list[dict[str, Any]] = []
            digests: list[bytes] = []
            for number, offset in enumerate(range(0, blob.size, size), start=1):
                chunk = blob.data[offset:offset + size]
                md5 = hashlib.md5(chunk)
                kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "UploadId": upload_id,
                                          "PartNumber": number, "Body": chunk,
                                          "ContentMD5": b64(md5.hexdigest())}
                part = {"PartNumber": number}
                if self.uploads.sha256_checksum:
                    kwargs["ChecksumSHA256"] = part["ChecksumSHA256"] = b64(
                        hashlib.sha256(chunk).hexdigest())
                response = self._call(f"put {key} part {number}", self.client.upload_part,
                                      **kwargs)
                if _etag(response) != md5.hexdigest():
                    raise CorruptUploadError(
                        f"{key} part {number}: ETag {_etag(response)} is not the part's MD5 "
                        f"{md5.hexdigest()}")
                parts.append({**part, "ETag": response["ETag"]})
                digests.append(md5.digest())
            response = self._call(f"complete multipart {key}",
                                  self.client.complete_multipart_upload, Bucket=bucket, Key=key,
                                  UploadId=upload_id, MultipartUpload={"Parts": parts})
        except BaseException:
            self._abort(key, upload_id)
            raise
        etag = _etag(response)
        if etag == multipart_etag(digests):
            return Receipt(etag, f"sha256:{blob.sha256}", "part-etags", parts=len(parts))
        return self._read_back(key, blob, etag, parts=len(parts))

    def _abort(self, key: str, upload_id: str) -> None:
        # Best effort: an upload left open costs storage until a lifecycle rule or the next
        # start's `prepare` removes it, never correctness (it is not an object).
        try:
            self.client.abort_multipart_upload(Bucket=self.location.bucket, Key=key,
                                               UploadId=upload_id)
        except Exception as exc:
            log.info("could not abort multipart upload of %s: %s", key, exc)

    def _read_back(self, key: str, blob: ShardBlob, etag: str | None, parts: int) -> Receipt:
        response = self._call(f"read back {key}", self.client.get_object,
                              Bucket=self.location.bucket, Key=key)
        try:
            body = response["Body"].read()
        except Exception as exc:
            raise classify(exc, f"read back {key}") from exc
        finally:
            response["Body"].close()
        got = hashlib.sha256(body).hexdigest()
        if got != blob.sha256:
            raise CorruptUploadError(
                f"{key}: the store holds {len(body)} bytes with sha256 {got[:16]}…, the shard "
                f"is {blob.size} bytes with sha256 {blob.sha256[:16]}… (ETag {etag})")
        return Receipt(etag, f"sha256:{got}", "read-back", parts=parts)

    # -- checking what the bucket holds --------------------------------------------------------

    def check(self, key: str, size: int, sha256: str, etag: str | None,
              read_back: bool = False) -> str | None:
        """HEAD: the object is there with the recorded size and ETag (an ETag changes with
        any rewrite of the object); `read_back` also reads it whole and compares SHA-256."""
        from botocore.exceptions import ClientError

        full = self.location.key(key)
        try:
            head = self.client.head_object(Bucket=self.location.bucket, Key=full)
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 404 or exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                return f"s3://{self.location.bucket}/{full} is missing"
            raise classify(exc, f"check {full}") from exc
        except Exception as exc:
            raise classify(exc, f"check {full}") from exc
        got_size = int(head.get("ContentLength", -1))
        if got_size != size:
            return f"s3://{self.location.bucket}/{full} holds {got_size} bytes, the DB says {size}"
        got_etag = _etag(head)
        if etag is not None and got_etag != etag:
            return (f"s3://{self.location.bucket}/{full} has ETag {got_etag}, the DB recorded "
                    f"{etag} (the object was replaced)")
        if read_back:
            got = hashlib.sha256(self.read(key)).hexdigest()
            if got != sha256:
                return (f"s3://{self.location.bucket}/{full} holds other bytes (sha256 "
                        f"{got[:16]}…, the DB says {sha256[:16]}…)")
        return None

    def list_keys(self, prefix: str = "") -> list[str]:
        base = self.location.key(prefix)
        paginator = self.client.get_paginator("list_objects_v2")
        keys: list[str] = []
        try:
            for page in paginator.paginate(Bucket=self.location.bucket, Prefix=base):
                for obj in page.get("Contents", []):
                    rel = obj["Key"][len(self.location.prefix):]
                    name = rel.rsplit("/", 1)[-1]
                    if name.startswith("shard-") and name.endswith(".jsonl"):
                        keys.append(rel)
        except Exception as exc:
            raise classify(exc, f"list {self.location}") from exc
        return sorted(keys)

    def read(self, key: str) -> bytes:
        full = self.location.key(key)
        response = self._call(f"read {full}", self.client.get_object,
                              Bucket=self.location.bucket, Key=full)
        try:
            return response["Body"].read()
        except Exception as exc:
            raise classify(exc, f"read {full}") from exc
        finally:
            response["Body"].close()

    # -- start --------------------------------------------------------------------------------

    def prepare(self, own_keys: set[str]) -> None:
        """Abort multipart uploads a killed daemon left open on this job's own keys (other
        nodes share the prefix; their keys are never in `own_keys`)."""
        wanted = {self.location.key(k) for k in own_keys}
        if not wanted:
            return
        paginator = self.client.get_paginator("list_multipart_uploads")
        try:
            pages = list(paginator.paginate(Bucket=self.location.bucket,
                                            Prefix=self.location.prefix))
        except Exception as exc:
            raise classify(exc, f"list multipart uploads under {self.location}") from exc
        for page in pages:
            for upload in page.get("Uploads", []):
                if upload["Key"] in wanted:
                    log.info("aborting multipart upload of %s left by an earlier run",
                             upload["Key"])
                    self._abort(upload["Key"], upload["UploadId"])
