"""Files that a kill never leaves half-written, and output paths checked before the work.

Every file the project writes (run files, vocabularies, translations, exports) goes to a
temporary name beside its target and is renamed onto it when complete: the rename is atomic on
POSIX file systems, so a process killed at any moment leaves the target either whole (old or
new) or absent. Commands check their output paths first (`check_new_output_file`), so that a
long computation never ends in an unwritable folder or an unasked overwrite.

Example:
    >>> with atomic_write("runs/x/history.json") as file:  # doctest: +SKIP
    ...     file.write("[]")
"""

import contextlib
import os
import pathlib
import shutil
import tempfile

from keras_transformer.errors import UserInputError


def check_output_file(path, flag):
    """Raises `UserInputError` when `path` (given with `flag`) could not be written: its folder
    is under a file, or is not writable. Cheap: callers check before a long computation.
    Folders that do not exist yet are fine (they are created)."""
    folder = os.path.dirname(os.path.abspath(path))
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserInputError(
            f"{flag} {path!r}: {existing!r} is a file, not a folder; choose another {flag}"
        )
    if not os.access(existing, os.W_OK):
        raise UserInputError(
            f"{flag} {path!r}: the folder {existing!r} is not writable; choose another {flag}"
        )


def check_new_output_file(path, flag, overwrite):
    """`check_output_file`, and an existing file at `path` refused unless `overwrite`: a
    command's output never replaces an earlier file unasked. Cheap: callers check before a
    long computation."""
    check_output_file(path, flag)
    if os.path.isdir(path):
        raise UserInputError(f"{flag} {path!r} is a folder; give a file name")
    if os.path.exists(path) and not overwrite:
        raise UserInputError(
            f"{flag} {path!r} exists already; give --overwrite to replace it, or another {flag}"
        )


def _umask():
    # The umask can only be read by setting it; set it straight back.
    umask = os.umask(0)
    os.umask(umask)
    return umask


@contextlib.contextmanager
def temporary_beside(path, suffix=""):
    """A temporary file name beside `path`, renamed onto `path` when the block succeeds and
    removed when it fails: for writers that want a file name rather than an open file
    (`model.save`, `shutil.copyfile`).

    Args:
        path: the final file.
        suffix: the temporary name's ending (some writers choose the format by it).

    Example:
        >>> with temporary_beside("runs/x/model.keras", ".keras") as name:  # doctest: +SKIP
        ...     model.save(name)
    """
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(
        dir=directory, prefix=f".{os.path.basename(path)}.", suffix=suffix
    )
    os.close(handle)
    try:
        yield temporary
        # mkstemp creates files readable by the owner only; give the final file the usual mode.
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


@contextlib.contextmanager
def atomic_write(path, mode="w", encoding=None):
    """Opens a temporary file beside `path` and renames it onto `path` on success.

    A kill mid-write leaves the previous `path` (if any) untouched; a failed write removes the
    temporary file.

    Args:
        path: the final file.
        mode: "w" (text) or "wb" (bytes).
        encoding: of a text file (`open`'s default when None).

    Example:
        >>> with atomic_write("runs/x/config.json") as file:  # doctest: +SKIP
        ...     file.write("{}")
    """
    with temporary_beside(path) as temporary, open(temporary, mode, encoding=encoding) as file:
        yield file
        file.flush()
        os.fsync(file.fileno())


def atomic_copy(source, path):
    """Copies `source` to `path` through a temporary file and a rename."""
    with temporary_beside(path) as temporary:
        shutil.copyfile(source, temporary)


@contextlib.contextmanager
def atomic_directory(path):
    """A temporary folder beside `path`, renamed onto `path` when the block succeeds (an
    existing folder is replaced) and removed when it fails: readers see the old folder or
    the new one whole, never a half-written one.

    Args:
        path: the final folder; its parent is created when missing.

    Raises:
        UserInputError: when nothing can be written beside `path`.

    Example:
        >>> with atomic_directory("exports/ct2") as staging:  # doctest: +SKIP
        ...     (staging / "model.bin").write_bytes(data)
    """
    path = pathlib.Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = pathlib.Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    except OSError as error:
        raise UserInputError(f"cannot write beside {path}: {error}") from None
    old = None
    try:
        yield staging
        # mkdtemp creates folders open to the owner only; give the final one the usual mode.
        os.chmod(staging, 0o777 & ~_umask())
        if path.exists():
            old = staging.with_name(staging.name + ".old")
            os.rename(path, old)
        try:
            os.rename(staging, path)
        except OSError:
            if old is not None:  # put the previous folder back
                os.rename(old, path)
                old = None
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
