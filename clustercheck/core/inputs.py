"""Reading a file the user named: its text, or bad input naming the file and what is wrong with it.

One reader for every input file (inventories, thresholds, model configs, baselines), so that a binary,
undecodable, oversized, missing or unreadable file is always exit 64 naming the file, never a traceback.
"""

from __future__ import annotations

from clustercheck.core.errors import InputError

MAX_INPUT_BYTES = 256 * 2 ** 20    # an input file larger than this is not one a person wrote or saved


def read_text_file(path: str, what: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The file's text (UTF-8, a leading byte-order mark dropped); InputError naming `path` and `what` it
    should have been ("inventory file") when it cannot be read as text."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise InputError(f"no such {what}", path) from None
    except IsADirectoryError:
        raise InputError(f"is a directory, not a {what}", path) from None
    except OSError as exc:
        raise InputError(f"cannot read {what} ({exc.strerror or exc})", path) from None
    if len(data) > max_bytes:
        raise InputError(f"not a {what}: larger than {max_bytes // 2 ** 20} MiB", path)
    if b"\0" in data:
        at = data.index(b"\0")
        raise InputError(f"not a text file ({what}): a NUL byte at offset {at}", path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise InputError(f"not a text file ({what}): not UTF-8, byte {data[exc.start:exc.start + 1]!r} at offset "
                         f"{exc.start}", path, line) from None
    return text[1:] if text.startswith("\ufeff") else text
