"""The training records in the bucket (gs://BUCKET/records/): `invoke data.upload`, and the
check a training job makes before anything is built or submitted."""

from __future__ import annotations

from launch.context.cloud import Cloud
from launch.errors import MissingError
from launch.stores.gcs import upload
from trainer.common.files import RECORDS_PREFIX


def upload_records(cloud: Cloud, records_dir: str, prune: bool = False) -> str:
    """`invoke data.upload`: needs only the project and the bucket."""
    bucket = cloud.fields(("project", "bucket"))["bucket"]
    result = upload.upload_records(cloud.storage(), bucket, records_dir, RECORDS_PREFIX, prune)
    deleted = f", deleted {len(result.deleted)}" if result.deleted else ""
    return (f"uploaded {len(result.uploaded)}, unchanged {len(result.skipped)}{deleted}: "
            f"gs://{bucket}/{RECORDS_PREFIX}/")


def require_training_data(cloud: Cloud, bucket: str, prefix: str = RECORDS_PREFIX) -> None:
    if problems := upload.training_data_problems(cloud.storage(), bucket, prefix):
        raise MissingError(f"gs://{bucket}/{prefix}/ {'; '.join(problems)}: "
                           "run `invoke data.convert` and `invoke data.upload --prune` first")
