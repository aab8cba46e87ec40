"""Downloads the real Oxford-IIIT Pets archives: verified, resumable, safely extracted."""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

from trainer.common.errors import DownloadError

PETS_BASE_URL = "https://thor.robots.ox.ac.uk/~vgg/data/pets"
CHUNK = 1 << 20
# Connections one fetch may open: a dropped one is resumed where it stopped, and a server that
# drops every one gives up here, keeping what arrived for the next command to resume.
MAX_CONNECTIONS = 20
# What one archive may expand to, and how many members it may hold: an archive's own size says
# nothing of what it writes (a 9.4 MB one can write 2 GiB). Pets' largest writes ~0.8 GB.
MAX_EXTRACTED_BYTES = 8 << 30
MAX_MEMBERS = 100_000
# And at most this many times its own size (plus a floor for small ones): what we extract,
# checkpoints and photos, is already dense (Pets' images ~1.05x; float weights ~1.1x), so a
# higher ratio is a bomb, and 9.4 MB may write at most 158 MB, not 2 GiB.
MAX_EXPANSION, EXPANSION_FLOOR = 10, 64 << 20


def extraction_bound(archive_path: Path, max_bytes: int = MAX_EXTRACTED_BYTES) -> int:
    """What the archive may write: `max_bytes`, and at most MAX_EXPANSION times its size."""
    return min(max_bytes, MAX_EXPANSION * archive_path.stat().st_size + EXPANSION_FLOOR)


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


def size_of(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def fetch_once(url: str, partial: Path, size: int, progress: bool) -> None:
    """Appends to `partial` from where it stopped (HTTP Range), or restarts from the answer
    of a server that ignores Range; reads at most `size` bytes in all. A connection that
    drops mid-body keeps what arrived: the file is short, for `fetch` to resume."""
    from tqdm import tqdm

    have = size_of(partial)
    if have == size:  # complete already: its digest decides
        return
    if have > size:  # not a prefix of the expected file: start over
        partial.unlink()
        have = 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as error:
        if error.code == 416 and have:  # the server's file ends before the expected size
            partial.unlink()
            raise DownloadError(f"{url}: the server's file ends at {have:,} bytes, not the "
                                f"expected {size:,}: a different file. The partial download "
                                "was removed.") from None
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
            while chunk := _read(response, min(CHUNK, size + 1 - written)):
                out.write(chunk)
                written += len(chunk)
                bar.update(len(chunk))
                if written > size:
                    break
    if written > size:
        partial.unlink()
        raise DownloadError(f"{url}: the server sent more than the expected {size} bytes; "
                            "stopped reading and removed the partial download")


def _read(response: http.client.HTTPResponse, size: int) -> bytes:
    """Up to `size` bytes of the body; none once the connection drops (reset, timed out)."""
    try:
        return response.read(size)
    except (http.client.HTTPException, OSError):
        return b""


def fetch(url: str, destination: Path, archive: Archive, progress: bool = True) -> Path:
    """Downloads `url` to `destination`, resuming a partial file and verifying the checksum.
    A short file is resumed (a dropped connection), never judged; only a complete one whose
    digest differs is a different file, fetched again once from byte 0 (a corrupt partial)."""
    if destination.exists() and sha256_of(destination) == archive.sha256:
        return destination
    partial = destination.with_name(destination.name + ".partial")
    restarted = False
    for _ in range(MAX_CONNECTIONS):
        fetch_once(url, partial, archive.size, progress)
        if size_of(partial) < archive.size:
            continue  # the connection dropped: resume
        actual = sha256_of(partial)
        if actual == archive.sha256:
            partial.rename(destination)
            return destination
        partial.unlink()
        if restarted:
            raise DownloadError(
                f"{url}: checksum mismatch (sha256 {actual}, expected {archive.sha256}); "
                "the server sent a different file. The partial download was removed.")
        restarted = True
    raise DownloadError(f"{url}: the connection dropped {MAX_CONNECTIONS} times; "
                        f"{size_of(partial):,} of {archive.size:,} bytes are kept in {partial}: "
                        "run the command again to resume")


def safe_extract(archive_path: Path, output_dir: Path, max_bytes: int = MAX_EXTRACTED_BYTES,
                 max_members: int = MAX_MEMBERS) -> None:
    """Extracts a tarball, refusing the whole archive before anything is written if a member
    would escape `output_dir` or is a device, or if its members number more than
    `max_members` or declare more than `max_bytes` in all (a small compressed archive can
    expand to fill the disk). What is written is counted too, and extraction stops (removing
    what it wrote) past `max_bytes`, whatever the headers said. `max_bytes` is lowered to
    `extraction_bound`: at most MAX_EXPANSION times the archive's own size."""
    root = output_dir.resolve()
    max_bytes = extraction_bound(archive_path, max_bytes)
    written: list[Path] = []
    try:
        with tarfile.open(archive_path) as tar:
            members = _checked_members(tar, archive_path, output_dir, max_bytes, max_members)
            total = 0
            for member in members:
                tar.extract(member, output_dir, filter=_data_filter)
                if member.isfile() or member.islnk():
                    written.append(root / member.name)
                    total += written[-1].stat().st_size
                if total > max_bytes:
                    raise DownloadError(f"{archive_path}: extracting it wrote more than "
                                        f"{max_bytes:,} bytes, more than its members declare; "
                                        "stopped and removed what it wrote")
    except tarfile.TarError as error:
        _remove(written)
        raise DownloadError(f"{archive_path}: not a readable tar archive ({error})") from None
    except DownloadError:
        _remove(written)
        raise


def _checked_members(tar: tarfile.TarFile, archive_path: Path, output_dir: Path,
                     max_bytes: int, max_members: int) -> list[tarfile.TarInfo]:
    """Every member's header, read (not extracted) one at a time, so a refusal comes before
    the whole stream has been decompressed. A hard link counts as its target's size: where
    linking fails, tarfile writes a copy."""
    root = output_dir.resolve()
    members: list[tarfile.TarInfo] = []
    sizes: dict[str, int] = {}
    declared = 0
    for member in tar:
        members.append(member)
        if len(members) > max_members:
            raise DownloadError(f"{archive_path}: more than {max_members:,} members; "
                                "refusing to extract (nothing written)")
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
        if member.issparse():  # its size is what remains after tarfile fills and truncates
            raise DownloadError(f"{archive_path}: member {member.name!r} is a sparse file, "
                                "whose written size its header does not bound; refusing to "
                                "extract (nothing written)")
        size = sizes.get(member.linkname, 0) if member.islnk() else \
            member.size if member.isfile() else 0
        sizes[member.name] = size
        declared += size
        if declared > max_bytes:
            raise DownloadError(f"{archive_path}: its members declare more than {max_bytes:,} "
                                "bytes in all; refusing to extract (nothing written)")
    return members


def _data_filter(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
    """tarfile's "data" filter, minus a directory's mode: extracting one member at a time, a
    read-only directory would refuse the members below it (extractall sets them last)."""
    member = tarfile.data_filter(member, path)
    return member.replace(mode=None, deep=False) if member.isdir() else member


def _remove(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


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
