"""Faults a user can fix, said in one line: a full disk, a read-only or forbidden
directory, no network, a locked catalogue. Used by the ``foxhunt`` command (for exceptions
it raises itself) and by the run summary (for a step's recorded error chain); anything
else is a bug and keeps its traceback."""

from __future__ import annotations

import errno
import re
import shutil
from pathlib import Path

_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_READ_ONLY = {errno.EROFS}
_FORBIDDEN = {errno.EACCES, errno.EPERM}
_NETWORK_CLASSES = {
    "ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout", "NewConnectionError",
    "MaxRetryError", "NameResolutionError", "gaierror", "ClientConnectorError",
    "ClientConnectionError", "ServerDisconnectedError", "TimeoutError",
}
_ERRNO_TEXT = re.compile(r"\[Errno (\d+)\][^:]*(?::\s*'?(?P<file>[^']*)'?)?")
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<holder>.+?\(PID \d+\))")


def _free_space(path: str | None) -> str:
    p = Path(path) if path else None
    while p is not None and not p.exists() and p != p.parent:
        p = p.parent
    if p is None:
        return ""
    try:
        return f" ({shutil.disk_usage(p).free / 1e9:.1f} GB free there)"
    except OSError:
        return ""


def _os_fault(code: int, filename: str | None) -> str | None:
    where = f" {filename}" if filename else ""
    if code in _DISK_FULL:
        return (f"disk full: no space left to write{where}{_free_space(filename)}; free some space "
                "(e.g. old files under $FOXHUNT_HOME/scratch) and rerun")
    if code in _READ_ONLY:
        return f"read-only filesystem: cannot write{where}; point FOXHUNT_HOME or --out at a writable place"
    if code in _FORBIDDEN:
        return f"permission denied:{where or ' a file'} (this user may not write or read it there)"
    return None


def _locked(message: str, path: str | None = None) -> str | None:
    if "Could not set lock" not in message and "Conflicting lock" not in message:
        return None
    m = _LOCK_HOLDER.search(message)
    holder = f" by {m['holder']}" if m else " by another process"
    file = re.search(r'on file "([^"]+)"', message)
    where = path or (file[1] if file else "the catalogue")
    return (f"catalogue {where} is locked{holder}: close that connection (or open it with "
            "read_only=True) and retry")


def _network(cls_name: str, message: str) -> str | None:
    if cls_name in _NETWORK_CLASSES or "Failed to establish a new connection" in message:
        host = re.search(r"host='([^']+)'", message)
        if host:
            return f"cannot reach {host[1]}: offline, or the name does not resolve ({cls_name})"
        short = message.strip().splitlines()[0][:160] if message.strip() else cls_name
        return f"cannot reach the network (offline?): {short}"
    return None


def one_line(exc: BaseException) -> str | None:
    """The one-line explanation of an operational fault anywhere in ``exc``'s chain, else None."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if type(e).__name__ == "CatalogueBusyError":
            return str(e)
        if isinstance(e, OSError) and e.errno is not None:
            msg = _os_fault(e.errno, e.filename)
            if msg:
                return msg
        msg = _locked(str(e)) or _network(type(e).__name__, str(e))
        if msg:
            return msg
        e = e.__cause__ or e.__context__
    return None


def one_line_from_info(error) -> str | None:
    """The same for a Dagster ``SerializableErrorInfo`` chain (a step's recorded error)."""
    seen = 0
    while error is not None and seen < 20:
        seen += 1
        message = error.message or ""
        if error.cls_name == "CatalogueBusyError":
            return _strip_class(message)
        m = _ERRNO_TEXT.search(message)
        if m:
            msg = _os_fault(int(m[1]), m["file"])
            if msg:
                return msg
        msg = _locked(message) or _network(error.cls_name, _strip_class(message))
        if msg:
            return msg
        error = error.cause or getattr(error, "context", None)
    return None


def _strip_class(message: str) -> str:
    """``"pkg.Cls: text"`` -> ``"text"`` (Dagster records errors with their class)."""
    head, sep, rest = message.partition(": ")
    return rest.strip() if sep and " " not in head else message.strip()


def project_error(error) -> str:
    """The clearest message in a step's error chain: an operational fault in one line, else
    the outermost error that is not Dagster's wrapper (the project's own ``DbnInputError``,
    a ``dg.Failure``), not the innermost library exception it was raised from."""
    fault = one_line_from_info(error)
    if fault:
        return fault
    e = error
    while e is not None and e.cls_name.startswith("Dagster") and e.cause is not None:
        e = e.cause
    text = _strip_class(e.message or "")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[0].strip() if lines else e.cls_name
