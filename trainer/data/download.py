"""Downloads the real Oxford-IIIT Pets archives: verified, resumable, safely extracted."""

from __future__ import annotations

import dataclasses
import hashlib
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

from trainer.errors import DownloadError

PETS_BASE_URL = "https://thor.robots.ox.ac.uk/~vgg/data/pets"
CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class Archive:
    filename: str
    sha256: str
    size: int


# Checksums and sizes as recorded by TensorFlow Datasets for oxford_iiit_pet.
PETS_ARCHIVES = (
    Archive("images.tar.gz", "67195c5e1c01f1ab5f9b6a5d22b8c27a580d896ece458917e61d459337fa318d",
            791918971),
    Archive("annotations.tar.gz",
            "52425fb6de5c424942b7626b428656fcbd798db970a937df61750c0f1d358e91", 19173078),
)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_once(url: str, partial: Path, size: int, progress: bool) -> None:
    """Appends to `partial` from where it stopped (HTTP Range), or restarts if not supported;
    reads at most `size` bytes in all."""
    from tqdm import tqdm

    have = partial.stat().st_size if partial.exists() else 0
    if have > size:  # not a prefix of the expected file: start over
        partial.unlink()
        have = 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have:  # nothing left to send: the file is complete already
            return
        raise DownloadError(f"{url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, TimeoutError) as error:
        raise DownloadError(f"{url}: cannot connect ({getattr(error, 'reason', error)})") from None
    with response:
        resumed = response.status == 206
        mode = "ab" if resumed else "wb"
        written = have if resumed else 0
        with partial.open(mode) as out, tqdm(total=size, initial=written, unit="B",
                                            unit_scale=True, desc=partial.stem,
                                            disable=not progress) as bar:
            # Never more than one byte past the declared size: an endless or oversized
            # answer cannot fill the disk.
            while chunk := response.read(min(CHUNK, size + 1 - written)):
                out.write(chunk)
                written += len(chunk)
                bar.update(len(chunk))
                if written > size:
                    break
    if written > size:
        partial.unlink()
        raise DownloadError(f"{url}: the server sent more than the expected {size} bytes; "
                            "stopped reading and removed the partial download")


def fetch(url: str, destination: Path, archive: Archive, progress: bool = True) -> Path:
    """Downloads `url` to `destination`, resuming a partial file and verifying the checksum."""
    if destination.exists() and sha256_of(destination) == archive.sha256:
        return destination
    partial = destination.with_name(destination.name + ".partial")
    for attempt in range(2):  # a corrupt partial file fails the check once; retry from scratch
        fetch_once(url, partial, archive.size, progress)
        actual = sha256_of(partial)
        if actual == archive.sha256:
            partial.rename(destination)
            return destination
        partial.unlink()
        if attempt == 1:
            raise DownloadError(
                f"{url}: checksum mismatch (sha256 {actual}, expected {archive.sha256}); "
                "the server sent a different file. The partial download was removed."
            )
    raise AssertionError("unreachable")


def safe_extract(archive_path: Path, output_dir: Path) -> None:
    """Extracts a tarball, refusing the whole archive if any member would escape `output_dir`."""
    root = output_dir.resolve()
    try:
        with tarfile.open(archive_path) as tar:
            for member in tar.getmembers():
                target = (root / member.name).resolve()
                if not target.is_relative_to(root):
                    raise DownloadError(f"{archive_path}: member {member.name!r} would be written "
                                        f"outside {output_dir}; refusing to extract")
                if member.issym() or member.islnk():
                    link = (target.parent / member.linkname).resolve()
                    if member.linkname.startswith("/") or not link.is_relative_to(root):
                        raise DownloadError(f"{archive_path}: link {member.name!r} points outside "
                                            f"{output_dir}; refusing to extract")
                if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                    raise DownloadError(f"{archive_path}: member {member.name!r} is a device or "
                                        "pipe; refusing to extract")
            tar.extractall(output_dir, filter="data")
    except tarfile.TarError as error:
        raise DownloadError(f"{archive_path}: not a readable tar archive ({error})") from None


def download_pets(output_dir: str | Path, base_url: str = PETS_BASE_URL,
                  archives: tuple[Archive, ...] = PETS_ARCHIVES, progress: bool = True) -> Path:
    """Fetches and extracts the Pets archives into `output_dir` (images/ and annotations/)."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    for archive in archives:
        path = fetch(f"{base_url.rstrip('/')}/{archive.filename}", output_dir / archive.filename,
                     archive, progress)
        safe_extract(path, output_dir)
    return output_dir
